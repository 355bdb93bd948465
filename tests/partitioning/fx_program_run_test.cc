// The FX programs the inductor backend writes, run by PyTorch itself: the tiny Llama's
// captured training step is split into partitions the inductor backend accepts (bounded in
// size, so there are several, with the forward/backward boundary inside one), each partition
// is written as an FX program, and the Python of the configured PyTorch (@libtorch//:python3:
// Debian's 1.13 on that leg, which has no AOTInductor) builds the torch.fx.GraphModule and
// runs it eagerly on the partition's real inputs. Same ATen kernels, same inputs: every
// output must be bitwise what the interpreter computes for the same values.
#include <torch/torch.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "magi/backend/inductor/fx_program.h"
#include "magi/backend/inductor/inductor_backend.h"
#include "magi/backend/inductor/subprocess.h"
#include "magi/backend/torch_executable.h"
#include "magi/base/file.h"
#include "magi/compat/torch_compat.h"
#include "magi/compiler/compiler.h"
#include "magi/compiler/partitioner.h"
#include "magi/frontend/capture/capture.h"
#include "magi/ir/graph_utils.h"
#include "magi/ir/magi_ops.h"
#include "magi/models/llama.h"

namespace magi {
namespace {

std::string g_python;  // @libtorch//:python3, from argv

absl::Status WriteTensor(const std::string& path, const at::Tensor& tensor) {
  at::Tensor contiguous = tensor.contiguous();
  return WriteFileAtomically(path, absl::string_view(static_cast<const char*>(contiguous.data_ptr()),
                                                     contiguous.numel() * contiguous.element_size()));
}

absl::StatusOr<at::Tensor> ReadTensor(const std::string& path, const TensorType& type) {
  absl::StatusOr<std::string> bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<c10::ScalarType> dtype = compat::ToScalarType(type.dtype);
  if (!dtype.ok()) return dtype.status();
  at::Tensor tensor = at::empty(type.sizes, at::TensorOptions().dtype(*dtype));
  if (static_cast<size_t>(tensor.numel() * tensor.element_size()) != bytes->size()) {
    return absl::DataLossError(absl::StrCat(path, ": ", bytes->size(), " bytes for ", type.ToString()));
  }
  std::memcpy(tensor.data_ptr(), bytes->data(), bytes->size());
  return tensor;
}

TEST(FxProgramRunTest, TinyLlamaPartitionsRunInPyTorchFxBitwise) {
  torch::manual_seed(0);
  models::Llama model(models::LlamaConfig::Tiny());
  at::Tensor tokens = torch::randint(0, 256, {2, 16}, torch::kLong);
  at::Tensor targets = torch::randint(0, 256, {2, 16}, torch::kLong);
  absl::StatusOr<CapturedGraph> captured = CaptureTrainingStep(
      *model, [&](const std::vector<at::Tensor>& in) { return models::LanguageModelLoss(model->forward(in[0]), in[1]); },
      {tokens, targets});
  ASSERT_TRUE(captured.ok()) << captured.status();
  absl::StatusOr<std::vector<at::Tensor>> inputs = BindInputs(*captured, *model, {tokens, targets});
  ASSERT_TRUE(inputs.ok()) << inputs.status();

  // The step as the compile driver partitions it: canonicalized (autograd's
  // gradient-accumulation copies elided; their new_empty_strided buffers hold no values).
  absl::StatusOr<CostModelBundle> cost = MakeCostModel(CostModelOptions());
  ASSERT_TRUE(cost.ok()) << cost.status();
  absl::StatusOr<OptimizedStep> optimized =
      OptimizeStep(std::move(captured->module), captured->graph_name, CompileOptions(), *cost->model);
  ASSERT_TRUE(optimized.ok()) << optimized.status();
  captured->module = CloneModule(*optimized->module);

  // Partitions as the inductor backend would take them (its capability without the
  // availability check: 1.13 has no AOTInductor, but its FX runs the programs).
  std::unique_ptr<Module> partitioned = CloneModule(*captured->module);
  Graph& step = *partitioned->FindGraph(captured->graph_name);
  Capability capability;
  for (const Node* node : step.nodes()) {
    std::string why = inductor::WhyInductorDeclines(*node);
    if (!why.empty()) capability.unsupported.emplace_back(node, why);
  }
  EXPECT_TRUE(capability.unsupported.empty()) << capability.unsupported[0].first->DebugName() << ": "
                                              << capability.unsupported[0].second;
  absl::StatusOr<std::vector<Partition>> partitions =
      OutlinePartitions(*partitioned, step, "inductor", capability, /*min_nodes=*/1, /*max_nodes=*/60);
  ASSERT_TRUE(partitions.ok()) << partitions.status();
  ASSERT_GE(partitions->size(), 4u);

  // The interpreter computes every value a partition reads or returns: the step with
  // those values added as outputs.
  std::unique_ptr<Module> probe = CloneModule(*captured->module);
  Graph& probe_step = *probe->FindGraph(captured->graph_name);
  const int step_outputs = static_cast<int>(probe_step.outputs().size());
  std::map<std::string, int> output_of;
  auto expose = [&](const std::string& name) {
    if (output_of.count(name)) return;
    Value* value = probe_step.FindValue(name);
    ASSERT_NE(value, nullptr) << name;
    output_of[name] = static_cast<int>(probe_step.outputs().size());
    probe_step.AddOutput("probe." + name, value);
  };
  // A partition input named after an earlier partition's call result is that partition's
  // output: its value keeps the step's original name in the callee graph.
  auto original = [&](const std::string& name) {
    const Value* value = step.FindValue(name);
    if (value == nullptr || value->producer() == nullptr || value->producer()->op() != kCallOp) return name;
    const Graph* callee = partitioned->FindGraph(CalleeName(*value->producer()));
    return callee->outputs()[value->result_index()].value->name();
  };
  for (const Partition& partition : *partitions) {
    const Graph& callee = *partitioned->FindGraph(partition.callee);
    for (const Value* input : callee.inputs()) expose(original(input->name()));
    for (const GraphOutput& output : callee.outputs()) expose(output.value->name());
  }
  absl::StatusOr<std::unique_ptr<TorchExecutable>> interpreter =
      CompileForTorch("interpreter", *probe, captured->graph_name);
  ASSERT_TRUE(interpreter.ok()) << interpreter.status();
  absl::StatusOr<std::vector<at::Tensor>> values = (*interpreter)->Run(*inputs);
  ASSERT_TRUE(values.ok()) << values.status();
  ASSERT_GT(static_cast<int>(values->size()), step_outputs);

  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/fx_programs");
  ASSERT_EQ(std::system(absl::StrCat("rm -rf '", dir, "' && mkdir -p '", dir, "'").c_str()), 0);
  int ops = 0;
  for (size_t k = 0; k < partitions->size(); ++k) {
    const Graph& callee = *partitioned->FindGraph((*partitions)[k].callee);
    absl::StatusOr<inductor::FxProgram> program = inductor::EmitFxProgram(callee);
    ASSERT_TRUE(program.ok()) << program.status();
    ops += program->num_ops;
    ASSERT_TRUE(WriteFileAtomically(absl::StrCat(dir, "/p", k, ".py"), program->source).ok());
    for (size_t i = 0; i < callee.inputs().size(); ++i) {
      ASSERT_TRUE(WriteTensor(absl::StrCat(dir, "/p", k, ".in", i, ".bin"),
                              (*values)[output_of.at(original(callee.inputs()[i]->name()))])
                      .ok());
    }
  }
  std::cout << partitions->size() << " partitions, " << ops << " aten ops\n";

  absl::StatusOr<inductor::Process> python = inductor::Process::Start(
      {g_python, "tests/partitioning/run_fx_programs.py", dir, std::to_string(partitions->size())}, {}, "", "");
  ASSERT_TRUE(python.ok()) << python.status();
  absl::StatusOr<int> exit_code = python->Wait();
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  ASSERT_EQ(*exit_code, 0) << "run_fx_programs.py failed (its output is above)";

  int compared = 0;
  for (size_t k = 0; k < partitions->size(); ++k) {
    const Graph& callee = *partitioned->FindGraph((*partitions)[k].callee);
    for (size_t j = 0; j < callee.outputs().size(); ++j) {
      const Value* value = callee.outputs()[j].value;
      absl::StatusOr<at::Tensor> got = ReadTensor(absl::StrCat(dir, "/p", k, ".out", j, ".bin"), value->type().tensor());
      ASSERT_TRUE(got.ok()) << got.status();
      const at::Tensor& expected = (*values)[output_of.at(value->name())];
      EXPECT_TRUE(torch::equal(expected.contiguous(), *got))
          << "@" << callee.name() << " output %" << value->name() << " differs by "
          << (expected.to(torch::kDouble) - got->to(torch::kDouble)).abs().max().item<double>();
      ++compared;
    }
  }
  std::cout << compared << " partition outputs bitwise equal to the interpreter's\n";
}

}  // namespace
}  // namespace magi

int main(int argc, char** argv) {
  // Every interpreter result must have the layout the IR gives it (step_plan.h): a rewrite
  // that mistypes one fails here instead of being read with the wrong strides.
  setenv("MAGI_CHECK_STRIDES", "1", /*overwrite=*/0);
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: fx_program_run_test PYTHON\n");
    return 2;
  }
  magi::g_python = argv[1];
  return RUN_ALL_TESTS();
}
