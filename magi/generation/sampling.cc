#include "magi/generation/sampling.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace magi {

absl::Status ValidateSampling(const SamplingOptions& options, int64_t vocab_size) {
  if (!std::isfinite(options.temperature) || options.temperature < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--temperature must be a finite number >= 0 (0: greedy), not ",
                                                   options.temperature));
  }
  if (options.top_k < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--top_k must be >= 0 (0: no limit), not ", options.top_k));
  }
  if (options.top_k > vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("--top_k=", options.top_k, " is more than the vocabulary (", vocab_size, " tokens)"));
  }
  return absl::OkStatus();
}

int64_t SampleNext(const at::Tensor& logits, const SamplingOptions& options, at::Generator& generator) {
  if (options.temperature <= 0) return logits.argmax().item<int64_t>();
  // Shifted by the max first, so no temperature overflows: the best byte gets 0, the rest
  // a negative number (or -inf, probability 0).
  at::Tensor scores = logits.to(at::kDouble);
  scores = (scores - scores.max()) / options.temperature;
  if (options.top_k > 0 && options.top_k < scores.size(0)) {
    at::Tensor kth = std::get<0>(scores.topk(options.top_k)).min();
    scores = scores.masked_fill(scores < kth, -std::numeric_limits<double>::infinity());
  }
  return at::multinomial(at::softmax(scores, -1), 1, /*replacement=*/false, generator).item<int64_t>();
}

}  // namespace magi
