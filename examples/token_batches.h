// TokenBatches: the training data of examples:train, as a stream indexed by step.
//
// Step s's global batch is `global_batch` samples drawn from a CPU generator seeded by
// (seed, s) alone: random token rows (the 1b model) or random windows of a text (tiny,
// small). Rank r of W ranks with B samples each takes samples [r * B, (r + 1) * B) of it.
// So the stream does not depend on the world size or on where a run was resumed:
//  - the ranks of a step read disjoint samples that together are the whole global batch;
//  - step s's first N samples are the same whatever the global batch (N <= it), so a run
//    resumed with another global batch G' reads, from its first step on, samples 0..G'-1
//    of each step's draw: the G samples the saving run would have read are the first G
//    of them (G' > G), or the first G' of those (G' < G). No sample of an earlier step is
//    read again, and every step reads a whole prefix of its own draw.
// What it does NOT do: epochs, shuffling without replacement (two samples of a text may
// be the same window) or any state between steps.
//
//   TokenBatches data = TokenBatches::TextWindows(corpus, /*seq=*/64, /*seed=*/0, device);
//   std::vector<at::Tensor> inputs_and_targets = data.Rows(step, world * local, rank * local, local);
#ifndef MAGI_EXAMPLES_TOKEN_BATCHES_H_
#define MAGI_EXAMPLES_TOKEN_BATCHES_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace magi::examples {

// The text at `path` as TextWindows' corpus: one Long token per byte, on the CPU. The read's
// error, or InvalidArgument "<path> is too short" when it has fewer than seq + 2 bytes.
absl::StatusOr<at::Tensor> ReadTextCorpus(const std::string& path, int seq);

class TokenBatches {
 public:
  // Rows of `vocab_size` random tokens; `device` is where Rows returns them.
  static TokenBatches RandomTokens(int64_t vocab_size, int seq, int seed, const at::Device& device);
  // Windows of `corpus` (a 1-D Long tensor of at least seq + 2 tokens, any device).
  static TokenBatches TextWindows(at::Tensor corpus, int seq, int seed);

  // Samples [first, first + count) of step `step`'s global batch of `global_batch`
  // samples: {inputs [count, seq], targets [count, seq]} (the targets are the inputs
  // shifted by one token). Requires 0 <= first, first + count <= global_batch.
  std::vector<at::Tensor> Rows(int step, int64_t global_batch, int64_t first, int64_t count) const;

 private:
  TokenBatches() = default;
  at::Generator StepGenerator(int step) const;

  bool random_tokens_ = false;
  int64_t vocab_size_ = 0;
  at::Tensor corpus_;  // TextWindows
  int seq_ = 0;
  int seed_ = 0;
  at::Device device_ = at::Device(at::kCPU);
};

}  // namespace magi::examples

#endif  // MAGI_EXAMPLES_TOKEN_BATCHES_H_
