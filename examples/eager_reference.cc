#include "examples/eager_reference.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace magi::examples {

std::unique_ptr<EagerReference> EagerReference::Create(const models::LlamaConfig& config, int seed,
                                                       const torch::Device& init_device, torch::Dtype init_dtype,
                                                       const torch::Device& device, const AdamWOptions& adamw) {
  auto reference = std::unique_ptr<EagerReference>(new EagerReference());
  torch::manual_seed(seed);
  reference->model_ = models::Llama(config, torch::TensorOptions().device(init_device).dtype(init_dtype));
  reference->model_->to(device, torch::kFloat);
  reference->optimizer_ =
      std::make_unique<torch::optim::AdamW>(reference->model_->parameters(), torch::optim::AdamWOptions(adamw.lr)
                                                                                 .betas({adamw.beta1, adamw.beta2})
                                                                                 .eps(adamw.eps)
                                                                                 .weight_decay(adamw.weight_decay));
  return reference;
}

std::string EagerReference::Step(const std::vector<at::Tensor>& global, double clip_grad_norm, double lr, double loss) {
  optimizer_->zero_grad();
  at::Tensor eager_loss = models::LanguageModelLoss(model_->forward(global[0]), global[1]);
  eager_loss.backward();
  if (clip_grad_norm > 0) torch::nn::utils::clip_grad_norm_(model_->parameters(), clip_grad_norm);
  static_cast<torch::optim::AdamWOptions&>(optimizer_->param_groups()[0].options()).lr(lr);
  optimizer_->step();
  const double expected = eager_loss.item<double>();
  const double relative = std::abs(loss - expected) / std::max(1e-12, std::abs(expected));
  // A NaN loss on either side must show, not vanish in std::max.
  if (std::isnan(relative) || relative > worst_relative_) worst_relative_ = relative;
  return absl::StrFormat(" | eager %.4f (rel diff %.1e)", expected, relative);
}

}  // namespace magi::examples
