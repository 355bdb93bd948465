// examples:train --dump_dir: what a PyTorch run on the same init and data needs, and what
// `magi compare` compares bitwise, as magi-tensors-v1 files (tensor_file.h): the initial
// full weights (weights.*) and every step's global batch (batches.*: step.<s>.tokens,
// step.<s>.targets) before training; every step's mean loss (losses.*, float64) and the
// final full parameters (final_weights.*) after it. Each call creates `dir` if needed.
#ifndef MAGI_EXAMPLES_TRAIN_DUMP_H_
#define MAGI_EXAMPLES_TRAIN_DUMP_H_

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace magi::examples {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// `global_batch(step)` is {tokens, targets} of step `step` (0-based), for steps 0 .. steps-1.
absl::Status WriteInitialDump(const std::string& dir, const NamedTensors& weights, int steps,
                              const std::function<std::vector<at::Tensor>(int)>& global_batch);
absl::Status WriteFinalDump(const std::string& dir, const std::vector<double>& losses,
                            const NamedTensors& final_weights);

}  // namespace magi::examples

#endif  // MAGI_EXAMPLES_TRAIN_DUMP_H_
