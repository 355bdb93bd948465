#include "magi/benchmarks/step_8b.h"

#include <torch/torch.h>

#include "magi/base/status_macros.h"
#include "magi/frontend/capture/capture.h"
#include "magi/frontend/fsdp/fsdp.h"
#include "magi/ir/verifier.h"
#include "magi/models/llama.h"

namespace magi {

absl::StatusOr<std::unique_ptr<Module>> BuildStep8B(int layers) {
  models::LlamaConfig config = models::LlamaConfig::Llama3_8B();
  config.n_layers = layers;
  config.max_seq_len = 2048;
  auto options = torch::TensorOptions().device(torch::kMeta).dtype(torch::kBFloat16);
  models::Llama model(config, options);
  MAGI_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create({kStep8BWorld}, {"dp"}, 0));
  FullyShardOptions shard_options;
  shard_options.mixed_precision.param_dtype = DType::kBFloat16;
  shard_options.mixed_precision.reduce_dtype = DType::kFloat32;
  for (auto& layer : model->layers) FullyShard(*layer, mesh, shard_options);
  FullyShard(*model, mesh, shard_options);
  auto meta_long = torch::TensorOptions().dtype(torch::kLong).device(torch::kMeta);
  CaptureOptions capture_options;
  capture_options.device = Device{DeviceType::kCuda, 0};
  MAGI_ASSIGN_OR_RETURN(
      CapturedGraph captured,
      CaptureTrainingStep(
          *model,
          [&](const std::vector<at::Tensor>& in) {
            return models::LanguageModelLoss(model->forward(in[0]).to(torch::kFloat), in[1]);
          },
          {torch::empty({1, 2048}, meta_long), torch::empty({1, 2048}, meta_long)}, capture_options));
  MAGI_ASSIGN_OR_RETURN(FsdpPlan plan, PlanFromFullyShard(*model));
  MAGI_RETURN_IF_ERROR(ShardForFsdp(*captured.module, *captured.graph(), plan));
  MAGI_RETURN_IF_ERROR(VerifyModule(*captured.module));
  return std::move(captured.module);
}

}  // namespace magi
