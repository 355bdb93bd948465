#include "magi/generation/sampling.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace magi {
namespace {

constexpr int64_t kLow32 = 0xFFFFFFFF;
// PCG's constants, as int64_t (c10::Scalar has no long long constructor on LibTorch 1.13).
constexpr int64_t kPcgMultiplier = 747796405, kPcgIncrement = 2891336453, kPcgWordMultiplier = 277803737;

// PCG's output permutation as a hash of 32-bit values (Jarzynski and Olano, "Hash Functions
// for GPU Rendering", JCGT 2020), on int64 tensors holding values below 2^32: every product
// stays below 2^62, so no signed overflow on any device.
at::Tensor Pcg(const at::Tensor& x) {
  at::Tensor state = (x * kPcgMultiplier + kPcgIncrement).bitwise_and(kLow32);
  at::Tensor word = (state.__rshift__(state.__rshift__(28) + 4).bitwise_xor(state) * kPcgWordMultiplier).bitwise_and(kLow32);
  return word.__rshift__(22).bitwise_xor(word);
}

}  // namespace

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

int64_t SamplingStreamKey(int64_t seed, int64_t prompt) {
  // SplitMix64's finalizer (Steele, Lea and Flood, 2014) on unsigned arithmetic (wraps by definition).
  uint64_t z = static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(prompt);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<int64_t>(z & static_cast<uint64_t>(kLow32));
}

at::Tensor ChooseTokens(const at::Tensor& logits, const SamplingOptions& options, const at::Tensor& keys,
                        const at::Tensor& draws) {
  if (options.temperature <= 0) return logits.argmax(-1);
  const int64_t vocab = logits.size(-1);
  // Shifted by the max first, so no temperature overflows: the best token gets 0, the rest a
  // negative number (or -inf, probability 0). Double: the noise's tails stay resolved.
  at::Tensor scores = logits.to(at::kDouble);
  scores = (scores - std::get<0>(scores.max(-1, /*keepdim=*/true))) / options.temperature;
  if (options.top_k > 0 && options.top_k < vocab) {
    at::Tensor kth = std::get<0>(scores.topk(options.top_k, -1)).narrow(-1, options.top_k - 1, 1);
    scores = scores.masked_fill(scores < kth, -std::numeric_limits<double>::infinity());
  }
  at::Tensor tokens = at::arange(vocab, logits.options().dtype(at::kLong));
  at::Tensor bits = Pcg(keys.unsqueeze(1).bitwise_xor(
      Pcg(draws.bitwise_and(kLow32).unsqueeze(1).bitwise_xor(Pcg(tokens).unsqueeze(0)))));
  at::Tensor uniform = (bits.to(at::kDouble) + 0.5) / 4294967296.0;  // in (0, 1)
  return (scores - (-uniform.log()).log()).argmax(-1);
}

}  // namespace magi
