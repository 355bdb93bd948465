// What the GPU training tests compare backends on: the tiny Llama on one GPU, FullyShard-ed
// over a world-1 NCCL group, with its batches and loss.
#ifndef TESTS_GPU_TINY_LLAMA_SETUP_H_
#define TESTS_GPU_TINY_LLAMA_SETUP_H_

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/frontend/fsdp/fsdp.h"
#include "magi/models/llama.h"

namespace magi {

struct TinyLlamaSetup {
  std::shared_ptr<Communicator> communicator;  // NCCL, world 1
  models::Llama model{nullptr};                // seeded 5; bf16 parameters with fp32 reduction when asked
  std::function<std::vector<at::Tensor>(int step)> batch;  // step's tokens and targets, [4, 32] each
  LossFunction loss;                           // cross-entropy of the fp32 logits
  AdamWOptions adamw;                          // lr 3e-3
};

absl::StatusOr<TinyLlamaSetup> MakeTinyLlamaSetup(bool bf16);

}  // namespace magi

#endif  // TESTS_GPU_TINY_LLAMA_SETUP_H_
