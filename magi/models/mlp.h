// A small MLP classifier: fc1 -> GELU -> dropout -> fc2. Used by tests and examples.
#ifndef MAGI_MODELS_MLP_H_
#define MAGI_MODELS_MLP_H_

#include "magi/models/layers.h"

namespace magi::models {

struct MlpConfig {
  int64_t in_features = 16;
  int64_t hidden = 32;
  int64_t out_features = 10;
  double dropout = 0.0;
};

class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(const MlpConfig& config, const torch::TensorOptions& options = {});
  // x: [batch, in_features] -> logits [batch, out_features].
  at::Tensor forward(const at::Tensor& x);

  MlpConfig config;
  Linear fc1{nullptr};
  Linear fc2{nullptr};
};
TORCH_MODULE(Mlp);

}  // namespace magi::models

#endif  // MAGI_MODELS_MLP_H_
