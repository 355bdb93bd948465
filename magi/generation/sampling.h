// Choosing the next token from a row of logits: greedy, or sampled with a temperature
// among the top_k most likely tokens (TextGenerator; the same rule on every rank).
#ifndef MAGI_GENERATION_SAMPLING_H_
#define MAGI_GENERATION_SAMPLING_H_

#include <ATen/ATen.h>

#include <cstdint>

#include "absl/status/status.h"

namespace magi {

struct SamplingOptions {
  double temperature = 0;  // 0: greedy (argmax); > 0 (finite): sample softmax(logits / temperature)
  int top_k = 0;           // > 0: sample among the top_k most likely bytes only (ignored when greedy)
  int64_t seed = 0;        // prompt i draws from a CPU generator seeded seed + i
};

// InvalidArgument naming the flag (--temperature, --top_k) for a NaN, infinite or negative
// temperature, a negative top_k, or a top_k larger than `vocab_size`.
absl::Status ValidateSampling(const SamplingOptions& options, int64_t vocab_size);

// The next token from `logits` ([vocab], any float dtype, CPU): the argmax when greedy,
// else a draw from `generator` (options validated).
int64_t SampleNext(const at::Tensor& logits, const SamplingOptions& options, at::Generator& generator);

}  // namespace magi

#endif  // MAGI_GENERATION_SAMPLING_H_
