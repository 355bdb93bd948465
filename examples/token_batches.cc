#include "examples/token_batches.h"

#include <ATen/CPUGeneratorImpl.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "magi/base/check.h"
#include "magi/base/file.h"

namespace magi::examples {

absl::StatusOr<at::Tensor> ReadTextCorpus(const std::string& path, int seq) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  if (static_cast<int64_t>(text->size()) < seq + 2)
    return absl::InvalidArgumentError(absl::StrCat(path, " is too short"));
  return at::from_blob(text->data(), {static_cast<int64_t>(text->size())}, at::kByte).to(at::kLong);
}

TokenBatches TokenBatches::RandomTokens(int64_t vocab_size, int seq, int seed, const at::Device& device) {
  TokenBatches batches;
  batches.random_tokens_ = true;
  batches.vocab_size_ = vocab_size;
  batches.seq_ = seq;
  batches.seed_ = seed;
  batches.device_ = device;
  return batches;
}

TokenBatches TokenBatches::TextWindows(at::Tensor corpus, int seq, int seed) {
  TokenBatches batches;
  batches.device_ = corpus.device();
  batches.corpus_ = std::move(corpus);
  batches.seq_ = seq;
  batches.seed_ = seed;
  return batches;
}

at::Generator TokenBatches::StepGenerator(int step) const {
  return at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(seed_) * 1000003 + step);
}

std::vector<at::Tensor> TokenBatches::Rows(int step, int64_t global_batch, int64_t first, int64_t count) const {
  MAGI_CHECK(first >= 0 && count >= 0 && first + count <= global_batch);
  at::Generator generator = StepGenerator(step);
  at::TensorOptions longs = at::TensorOptions().dtype(at::kLong);
  // One draw per sample, in sample order (LibTorch's CPU randint fills element by element),
  // so a step's first N samples do not depend on global_batch.
  if (random_tokens_) {
    at::Tensor tokens = at::randint(0, vocab_size_, {global_batch, seq_ + 1}, generator, longs);
    at::Tensor rows = tokens.narrow(0, first, count).to(device_);
    return {rows.narrow(1, 0, seq_).contiguous(), rows.narrow(1, 1, seq_).contiguous()};
  }
  at::Tensor starts = at::randint(0, corpus_.size(0) - seq_ - 1, {global_batch}, generator, longs);
  std::vector<at::Tensor> inputs, targets;
  for (int64_t i = first; i < first + count; ++i) {
    const int64_t start = starts[i].item<int64_t>();
    inputs.push_back(corpus_.narrow(0, start, seq_));
    targets.push_back(corpus_.narrow(0, start + 1, seq_));
  }
  return {at::stack(inputs), at::stack(targets)};
}

}  // namespace magi::examples
