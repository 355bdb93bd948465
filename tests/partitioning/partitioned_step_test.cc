// A captured training step split between the "elementwise" backend (runs of float32
// arithmetic as fused loops) and the interpreter (everything else), through the
// compile driver, against the interpreter alone on the same inputs.
#include <torch/torch.h>

#include "gtest/gtest.h"
#include <cstdlib>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "magi/backend/torch_executable.h"
#include "magi/calibration/torch_kernel_calibrator.h"
#include "magi/compiler/compiler.h"
#include "magi/cost/simulator.h"
#include "magi/frontend/capture/capture.h"
#include "magi/ir/graph_utils.h"
#include "magi/ir/magi_ops.h"
#include "magi/ir/parser.h"
#include "magi/ir/printer.h"
#include "magi/models/llama.h"

namespace magi {
namespace {

struct Outcome {
  CompiledStep compiled;
  std::vector<at::Tensor> outputs;
};

Outcome CompileAndRun(const CapturedGraph& captured, const std::vector<at::Tensor>& inputs,
                  const std::vector<std::string>& partition_backends, bool recompute_fusible = false) {
  CompileOptions options;
  options.partitioning.backends = partition_backends;
  options.partitioning.recompute_fusible = recompute_fusible;
  absl::StatusOr<CompiledStep> compiled = Compile(CloneModule(*captured.module), captured.graph_name, options);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  if (!compiled.ok()) return {};
  auto* executable = dynamic_cast<TorchExecutable*>(compiled->executable.get());
  EXPECT_NE(executable, nullptr);
  absl::StatusOr<std::vector<at::Tensor>> outputs = executable->Run(inputs);
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  return {*std::move(compiled), outputs.ok() ? *outputs : std::vector<at::Tensor>()};
}

// The tiny Llama's training step, captured, and its inputs (seed 0).
struct TinyStep {
  absl::StatusOr<CapturedGraph> captured = absl::UnknownError("not captured");
  absl::StatusOr<std::vector<at::Tensor>> inputs = absl::UnknownError("not bound");
};
TinyStep CaptureTinyLlamaStep() {
  torch::manual_seed(0);
  models::Llama model(models::LlamaConfig::Tiny());
  at::Tensor tokens = torch::randint(0, 256, {2, 16}, torch::kLong);
  at::Tensor targets = torch::randint(0, 256, {2, 16}, torch::kLong);
  TinyStep step;
  step.captured = CaptureTrainingStep(
      *model, [&](const std::vector<at::Tensor>& in) { return models::LanguageModelLoss(model->forward(in[0]), in[1]); },
      {tokens, targets});
  if (step.captured.ok()) step.inputs = BindInputs(*step.captured, *model, {tokens, targets});
  return step;
}

TEST(PartitionedStepTest, TinyLlamaStepMatchesTheInterpreter) {
  TinyStep tiny = CaptureTinyLlamaStep();
  ASSERT_TRUE(tiny.captured.ok()) << tiny.captured.status();
  ASSERT_TRUE(tiny.inputs.ok()) << tiny.inputs.status();
  const CapturedGraph& captured = *tiny.captured;
  const std::vector<at::Tensor>& inputs = *tiny.inputs;

  Outcome reference = CompileAndRun(captured, inputs, {});
  Outcome partitioned = CompileAndRun(captured, inputs, {"elementwise"});
  ASSERT_FALSE(partitioned.compiled.partitions.empty()) << "nothing was elementwise";
  int calls = 0;
  for (const Node* node : partitioned.compiled.graph().nodes()) calls += node->op() == kCallOp;
  EXPECT_EQ(calls, static_cast<int>(partitioned.compiled.partitions.size()));
  // The two layers' identical runs share executables.
  std::cout << FormatPartitions(partitioned.compiled.partitions);

  ASSERT_EQ(reference.outputs.size(), partitioned.outputs.size());
  for (size_t i = 0; i < reference.outputs.size(); ++i) {
    const std::string& name = reference.compiled.graph().outputs()[i].name;
    EXPECT_TRUE(torch::equal(reference.outputs[i], partitioned.outputs[i]))
        << name << " differs by " << (reference.outputs[i] - partitioned.outputs[i]).abs().max().item<double>();
  }
}

// The recompute-fusible rewrite on the real step (silu and RMSNorm's normalized x per
// layer, recomputed in the backward from values saved anyway): the same ops on the same
// inputs, so the step's results stay bitwise the plain step's.
TEST(PartitionedStepTest, FusibleActivationsRecomputedGiveTheSameStep) {
  TinyStep tiny = CaptureTinyLlamaStep();
  ASSERT_TRUE(tiny.captured.ok()) << tiny.captured.status();
  ASSERT_TRUE(tiny.inputs.ok()) << tiny.inputs.status();
  Outcome reference = CompileAndRun(*tiny.captured, *tiny.inputs, {});
  CompileOptions options;
  options.optimization.passes = "recompute-fusible";
  absl::StatusOr<CompiledStep> compiled = Compile(CloneModule(*tiny.captured->module), tiny.captured->graph_name, options);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  int copies = 0;
  for (const Node* node : compiled->graph().nodes()) {
    copies += node->annotations().remat == RematDecision::kRecompute && node->annotations().phase == Phase::kBackward;
  }
  EXPECT_EQ(copies, 2 * 2 + 1 + 2);  // per layer silu and two norms' x * rsqrt, the final norm's
  EXPECT_LT(compiled->optimized.prediction.peak_bytes, reference.compiled.optimized.prediction.peak_bytes);
  auto* executable = dynamic_cast<TorchExecutable*>(compiled->executable.get());
  ASSERT_NE(executable, nullptr);
  absl::StatusOr<std::vector<at::Tensor>> outputs = executable->Run(*tiny.inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  ASSERT_EQ(reference.outputs.size(), outputs->size());
  for (size_t i = 0; i < outputs->size(); ++i) {
    EXPECT_TRUE(torch::equal(reference.outputs[i], (*outputs)[i])) << reference.compiled.graph().outputs()[i].name;
  }
}

// Calibration by default times each distinct compiled partition by itself (the elementwise
// backend's fused loops, run through their TorchExecutable on synthesized inputs) and
// predicts the partitioned step with those times; the step still runs as before.
TEST(PartitionedStepTest, CompiledPartitionsAreTimedForThePrediction) {
  TinyStep tiny = CaptureTinyLlamaStep();
  ASSERT_TRUE(tiny.captured.ok()) << tiny.captured.status();
  ASSERT_TRUE(tiny.inputs.ok()) << tiny.inputs.status();
  const CapturedGraph& captured = *tiny.captured;
  const std::vector<at::Tensor>& inputs = *tiny.inputs;

  CompileOptions options;
  options.partitioning.backends = {"elementwise"};
  options.cost_model.device_profile = "cpu";
  options.cost_model.calibrator = MakeTorchKernelCalibrator(TorchKernelCalibratorOptions());
  const char* tmp = std::getenv("TEST_TMPDIR");
  options.cost_model.calibration_cache_dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/partition_times";
  absl::StatusOr<CompiledStep> compiled = Compile(CloneModule(*captured.module), captured.graph_name, options);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  ASSERT_FALSE(compiled->partitions.empty());
  std::set<std::string> call_keys;
  for (const Node* node : compiled->graph().nodes()) {
    if (node->op() != kCallOp) continue;
    const std::string key = CalibrationTable::KeyOf(*node);
    call_keys.insert(key);
    std::optional<double> seconds = compiled->calibration->Find(key);
    ASSERT_TRUE(seconds.has_value()) << key;
    EXPECT_GT(*seconds, 0) << key;
    // And the memory the compiled partition allocates while it runs (its registers).
    std::optional<int64_t> working_bytes = compiled->calibration->FindWorkingBytes(key);
    ASSERT_TRUE(working_bytes.has_value()) << key;
    EXPECT_GT(*working_bytes, 0) << key;
  }
  const std::string expected = absl::StrCat(call_keys.size(), " of ", call_keys.size(), " distinct partitions timed as compiled");
  bool noted = false;
  for (const std::string& note : compiled->notes) noted |= note.find(expected) != std::string::npos;
  EXPECT_TRUE(noted) << absl::StrJoin(compiled->notes, "\n");
  // The prediction is of the graph that runs: simulating it with the same table agrees.
  CostModel model_of_step(*LoadDeviceProfile("cpu"), compiled->calibration.get());
  absl::StatusOr<SimulationResult> again = Simulate(compiled->graph(), model_of_step);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_DOUBLE_EQ(again->step_seconds, compiled->prediction.step_seconds);
  EXPECT_EQ(again->peak_bytes, compiled->prediction.peak_bytes);
  EXPECT_NE(compiled->prediction.step_seconds, compiled->optimized.prediction.step_seconds);

  auto* executable = dynamic_cast<TorchExecutable*>(compiled->executable.get());
  ASSERT_NE(executable, nullptr);
  Outcome reference = CompileAndRun(captured, inputs, {});
  absl::StatusOr<std::vector<at::Tensor>> outputs = executable->Run(inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  ASSERT_EQ(outputs->size(), reference.outputs.size());
  for (size_t i = 0; i < outputs->size(); ++i) EXPECT_TRUE(torch::equal((*outputs)[i], reference.outputs[i])) << i;
  // The predicted peak is what the run held: the interpreter's live storage, each
  // partition's registers counted while it runs.
  EXPECT_EQ(executable->last_run_stats().peak_live_bytes, compiled->prediction.peak_bytes);
}

TEST(PartitionedStepTest, AlphaUsesOneRoundingLikeATen) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(R"(module @m {
  graph @g {
    input %a: f32[1000]
    input %b: f32[1000]
    input %s: f32[]
    %c = aten::add.Tensor(%a, %b, alpha = 0.3) : f32[1000]
    %d = aten::sub.Tensor(%c, %a, alpha = 2) : f32[1000]
    %e = aten::mul.Tensor(%d, %s) : f32[1000]
    %f = aten::relu(%e) : f32[1000]
    %g = aten::mul.Scalar(%f, 0.5) : f32[1000]
    output g = %g
    output d = %d
  }
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  torch::manual_seed(1);
  std::vector<at::Tensor> inputs = {torch::randn({1000}), torch::randn({1000}), torch::scalar_tensor(1.7f)};
  CapturedGraph captured;
  captured.module = *std::move(module);
  captured.graph_name = "g";
  Outcome reference = CompileAndRun(captured, inputs, {});
  Outcome partitioned = CompileAndRun(captured, inputs, {"elementwise"});
  ASSERT_EQ(partitioned.compiled.partitions.size(), 1u);
  EXPECT_EQ(partitioned.compiled.partitions[0].num_nodes, 5);
  for (size_t i = 0; i < reference.outputs.size(); ++i) {
    EXPECT_TRUE(torch::allclose(reference.outputs[i], partitioned.outputs[i], /*rtol=*/1e-6, /*atol=*/1e-6));
  }
}

}  // namespace
}  // namespace magi
