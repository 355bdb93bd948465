// The module path that capture records on each node ("layers.3.mlp.up_proj").
//
// LibTorch's C++ modules have no forward hooks, so model code names its submodules
// as it calls them; the scopes nest and are per thread:
//
//   at::Tensor Block::forward(at::Tensor x) {
//     magi::ScopedModulePath scope("mlp");
//     return mlp_->forward(x);          // nodes recorded here get ".../mlp"
//   }
//
// Ops of the backward pass get the path of the forward op that created their autograd
// node (the capture frontend maps autograd sequence numbers). No LibTorch dependency.
#ifndef MAGI_MODULE_API_MODULE_SCOPE_H_
#define MAGI_MODULE_API_MODULE_SCOPE_H_

#include <string>

namespace magi {

class ScopedModulePath {
 public:
  // Appends `name` to this thread's module path until the scope ends. An empty name
  // leaves the path unchanged.
  explicit ScopedModulePath(const std::string& name);
  ~ScopedModulePath();
  ScopedModulePath(const ScopedModulePath&) = delete;
  ScopedModulePath& operator=(const ScopedModulePath&) = delete;

 private:
  size_t previous_length_;
};

// This thread's current module path ("" at top level).
const std::string& CurrentModulePath();

}  // namespace magi

#endif  // MAGI_MODULE_API_MODULE_SCOPE_H_
