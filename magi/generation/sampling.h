// Choosing the next token from rows of logits, on the device that holds them: greedy, or
// sampled with a temperature among the top_k most likely tokens (TextGenerator).
//
// Sampling is counter-based: a row's draw is the Gumbel-max of its scores, with the noise of
// token t a hash of (the row's stream key, the draw's index, t) instead of a generator's
// state. So a draw is a pure function of the row's logits and those three numbers: tokens
// are chosen on the device inside a run of decode steps (no read per token), and the text
// depends neither on the batch, the world size, nor how often tokens are read back.
#ifndef MAGI_GENERATION_SAMPLING_H_
#define MAGI_GENERATION_SAMPLING_H_

#include <ATen/ATen.h>

#include <cstdint>

#include "absl/status/status.h"

namespace magi {

struct SamplingOptions {
  double temperature = 0;  // 0: greedy (argmax); > 0 (finite): sample softmax(logits / temperature)
  int top_k = 0;           // > 0: sample among the top_k most likely tokens only (ignored when greedy)
  int64_t seed = 0;        // prompt i draws from the stream SamplingStreamKey(seed, i)
};

// InvalidArgument naming the flag (--temperature, --top_k) for a NaN, infinite or negative
// temperature, a negative top_k, or a top_k larger than `vocab_size`.
absl::Status ValidateSampling(const SamplingOptions& options, int64_t vocab_size);

// The 32-bit key of prompt `prompt`'s draws under `seed` (a SplitMix64 mix of both).
int64_t SamplingStreamKey(int64_t seed, int64_t prompt);

// The next token of each row of `logits` ([rows, vocab], any float dtype, any device;
// options validated), as int64 [rows] on that device: the argmax when greedy, else
// argmax(scores + Gumbel noise) with scores = (logits - max) / temperature, those below the
// top_k-th set to -inf, and the noise of token t -log(-log(u)) for u a hash of (keys[r],
// draws[r], t) in (0, 1). `keys` and `draws` are int64 [rows] on the same device: a row's
// stream key (SamplingStreamKey) and how many tokens its stream has drawn before.
at::Tensor ChooseTokens(const at::Tensor& logits, const SamplingOptions& options, const at::Tensor& keys,
                        const at::Tensor& draws);

}  // namespace magi

#endif  // MAGI_GENERATION_SAMPLING_H_
