// The 8B-shaped training step the search benchmarks optimize, captured (not synthesized):
// Llama 3 8B shapes (dim 4096, ffn 14336, vocab 128256), bf16 parameters with fp32
// masters and reductions, one 2048-token sequence per rank, captured on meta and sharded
// for 8 ranks (one FSDP group per layer plus the root group). `layers` = 32 is the real
// depth (9,865 nodes); fewer layers give the reduced versions exhaustive searches can
// cover. Building it links LibTorch; what the benchmarks then measure is LibTorch-free.
#ifndef MAGI_BENCHMARKS_STEP_8B_H_
#define MAGI_BENCHMARKS_STEP_8B_H_

#include <memory>

#include "absl/status/statusor.h"
#include "magi/ir/module.h"

namespace magi {

constexpr int64_t kStep8BWorld = 8;

// The sharded step (graph @train_step) with `layers` decoder layers.
absl::StatusOr<std::unique_ptr<Module>> BuildStep8B(int layers = 32);

}  // namespace magi

#endif  // MAGI_BENCHMARKS_STEP_8B_H_
