// How a module's parameters and buffers get their initial values, one tensor at a time
// (PyTorch's reset_parameters(), FSDP2's meta-device initialization).
//
// A model built on the meta device holds no data. Sharded materialization
// (magi/frontend/fsdp/materialize.h) then gives each of its parameters and buffers, one
// at a time, a fresh tensor of the full shape on a real device and asks the module that
// registered it to fill it, exactly as its constructor does on a real device:
//
//   class LinearImpl : public torch::nn::Module, public magi::ResetsParameters {
//     void ResetParameter(const std::string& name, at::Tensor& tensor) override {
//       if (name == "weight") tensor.normal_(0.0, 0.02);
//     }
//   };
//
// Materialization visits modules in named_modules() order (pre-order) and, within a
// module, its own parameters then its own buffers in registration order, drawing from
// LibTorch's default generator. A model whose constructors draw random numbers in the
// same order (every parameter initialized when it is registered, parents before their
// children's draws) materializes to exactly the weights a construction on a real device
// after the same torch::manual_seed gives, whatever the world size. No LibTorch
// dependency here beyond the forward declaration.
#ifndef MAGI_MODULE_API_RESET_PARAMETERS_H_
#define MAGI_MODULE_API_RESET_PARAMETERS_H_

#include <string>

namespace at {
class Tensor;
}  // namespace at

namespace magi {

class ResetsParameters {
 public:
  virtual ~ResetsParameters() = default;
  // Fills `tensor` (full shape and dtype of the module's own parameter or buffer `name`,
  // on a real device, uninitialized) with its initial value, under no-grad.
  virtual void ResetParameter(const std::string& name, at::Tensor& tensor) = 0;
};

}  // namespace magi

#endif  // MAGI_MODULE_API_RESET_PARAMETERS_H_
