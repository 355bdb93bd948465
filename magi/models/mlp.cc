#include "magi/models/mlp.h"

namespace magi::models {

MlpImpl::MlpImpl(const MlpConfig& c, const torch::TensorOptions& options) : config(c) {
  fc1 = register_module("fc1", Linear(c.in_features, c.hidden, /*bias=*/true, options));
  fc2 = register_module("fc2", Linear(c.hidden, c.out_features, /*bias=*/true, options));
}

at::Tensor MlpImpl::forward(const at::Tensor& x) {
  at::Tensor h = CallScoped("fc1", fc1, x);
  {
    ScopedModulePath scope("act");
    h = torch::gelu(h);
    if (config.dropout > 0) h = torch::dropout(h, config.dropout, is_training());
  }
  return CallScoped("fc2", fc2, h);
}

}  // namespace magi::models
