// Building blocks for Magi's reference models, built directly on a given device and
// dtype (including meta, where nothing is allocated: LibTorch cannot move a module to
// meta after the fact). Parameters are initialized from LibTorch's default generator
// (normal, std 0.02) so torch::manual_seed makes models reproducible; meta parameters
// are left uninitialized, and each module initializes one of its tensors on request
// (magi::ResetsParameters) with the same draws, so a model built on meta materializes
// shard by shard to the same weights.
#ifndef MAGI_MODELS_LAYERS_H_
#define MAGI_MODELS_LAYERS_H_

#include <torch/torch.h>

#include <string>

#include "magi/module_api/module_scope.h"
#include "magi/module_api/reset_parameters.h"

namespace magi::models {

// y = x W^T (+ b).
class LinearImpl : public torch::nn::Module, public ResetsParameters {
 public:
  LinearImpl(int64_t in_features, int64_t out_features, bool bias, const torch::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x);
  void ResetParameter(const std::string& name, at::Tensor& tensor) override;  // weight: N(0, 0.02); bias: 0
  at::Tensor weight;
  at::Tensor bias;
};
TORCH_MODULE(Linear);

// Token embedding table [num_embeddings, dim].
class EmbeddingImpl : public torch::nn::Module, public ResetsParameters {
 public:
  EmbeddingImpl(int64_t num_embeddings, int64_t dim, const torch::TensorOptions& options);
  at::Tensor forward(const at::Tensor& ids);
  void ResetParameter(const std::string& name, at::Tensor& tensor) override;  // weight: N(0, 0.02)
  at::Tensor weight;
};
TORCH_MODULE(Embedding);

// RMSNorm: x / sqrt(mean(x^2) + eps) * weight.
class RMSNormImpl : public torch::nn::Module, public ResetsParameters {
 public:
  RMSNormImpl(int64_t dim, double eps, const torch::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x);
  void ResetParameter(const std::string& name, at::Tensor& tensor) override;  // weight: 1
  at::Tensor weight;
  double eps;
};
TORCH_MODULE(RMSNorm);

// Calls `module->forward(args...)` inside a module-path scope named `name`.
template <typename M, typename... Args>
auto CallScoped(const std::string& name, M& module, Args&&... args) {
  ScopedModulePath scope(name);
  return module->forward(std::forward<Args>(args)...);
}

// Fills `tensor` with N(0, std) unless it is on meta.
void InitNormal(at::Tensor& tensor, double std);

}  // namespace magi::models

#endif  // MAGI_MODELS_LAYERS_H_
