#include "tests/gpu/tiny_llama_setup.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <ATen/CPUGeneratorImpl.h>

#include "magi/base/status_macros.h"
#include "magi/runtime/nccl/nccl_communicator.h"

namespace magi {

absl::StatusOr<TinyLlamaSetup> MakeTinyLlamaSetup(bool bf16) {
  TinyLlamaSetup setup;
  auto store = c10::make_intrusive<c10d::HashStore>();
  MAGI_ASSIGN_OR_RETURN(setup.communicator, CreateNcclCommunicator(store, 0, 1, "dp", 0, std::chrono::seconds(60)));
  torch::manual_seed(5);
  auto options = torch::TensorOptions().device(torch::kCUDA).dtype(bf16 ? torch::kBFloat16 : torch::kFloat);
  setup.model = models::Llama(models::LlamaConfig::Tiny(), options);
  DeviceMesh mesh = *DeviceMesh::Create({1}, {"dp"}, 0);
  FullyShardOptions shard_options;
  if (bf16) {
    shard_options.mixed_precision.param_dtype = DType::kBFloat16;
    shard_options.mixed_precision.reduce_dtype = DType::kFloat32;
  }
  for (auto& layer : setup.model->layers) FullyShard(*layer, mesh, shard_options);
  FullyShard(*setup.model, mesh, shard_options);
  const auto long_options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kLong);
  setup.batch = [long_options](int step) {
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(100 + step);
    at::Tensor tokens = torch::randint(0, 256, {4, 32}, generator, torch::kLong).to(long_options);
    at::Tensor targets = torch::randint(0, 256, {4, 32}, generator, torch::kLong).to(long_options);
    return std::vector<at::Tensor>{tokens, targets};
  };
  std::shared_ptr<models::LlamaImpl> model = setup.model.ptr();  // the same module
  setup.loss = [model](const std::vector<at::Tensor>& in) {
    return models::LanguageModelLoss(model->forward(in[0]).to(torch::kFloat), in[1]);
  };
  setup.adamw.lr = 3e-3;
  return setup;
}

}  // namespace magi
