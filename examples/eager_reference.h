// examples:train --check_eager: an eager LibTorch copy of the model trained on the global
// batch with torch::optim::AdamW, the same initial weights and learning rates, against which
// each step's (rank-averaged) loss is compared.
//
//   auto reference = magi::examples::EagerReference::Create(config, seed, init_device, dtype, device, adamw);
//   std::string note = reference->Step(global_batch, clip_grad_norm, lr, loss);  // " | eager ... (rel diff ...)"
#ifndef MAGI_EXAMPLES_EAGER_REFERENCE_H_
#define MAGI_EXAMPLES_EAGER_REFERENCE_H_

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "magi/models/llama.h"
#include "magi/training/step_options.h"

namespace magi::examples {

class EagerReference {
 public:
  // Draws the initial weights as the trained model did: torch::manual_seed(seed), then the
  // model built in `init_dtype` on `init_device` (a bf16 draw is not the rounding of an fp32
  // one: LibTorch's CPU normal_ samples in another order; with --init=meta the host, whose
  // generator the shards are materialized from: materialize.h). It then trains in fp32 on
  // `device`.
  static std::unique_ptr<EagerReference> Create(const models::LlamaConfig& config, int seed,
                                                const torch::Device& init_device, torch::Dtype init_dtype,
                                                const torch::Device& device, const AdamWOptions& adamw);

  // One step on the global batch {tokens, targets} at learning rate `lr` (clipping the
  // gradient norm to `clip_grad_norm` when > 0); compares its loss with `loss` and returns
  // the note for the progress line, " | eager 4.1234 (rel diff 1.2e-07)".
  std::string Step(const std::vector<at::Tensor>& global, double clip_grad_norm, double lr, double loss);
  // The largest relative loss difference so far (NaN once either side was NaN).
  double worst_relative() const { return worst_relative_; }

 private:
  EagerReference() = default;
  models::Llama model_{nullptr};
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  double worst_relative_ = 0;
};

}  // namespace magi::examples

#endif  // MAGI_EXAMPLES_EAGER_REFERENCE_H_
