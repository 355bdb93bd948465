// The "megakernel" partition backend through the compile driver: a decode graph is claimed
// whole (one partition, the caches' writes included) and the compiled step equals the
// interpreter's; anything else is declined with the matcher's reason and still runs.
#include "magi/backend/megakernel/megakernel_backend.h"

#include <memory>
#include <regex>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/version.h>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "magi/backend/megakernel/test_inputs.h"
#include "magi/backend/torch_executable.h"
#include "magi/base/gtest_printers.h"
#include "magi/compiler/compiler.h"
#include "magi/ir/graph_utils.h"
#include "magi/ir/parser.h"
#include "magi/ir/printer.h"
#include "magi/registry/registry.h"

namespace magi::megakernel {
namespace {

using testing::Clones;
using testing::MaxDiff;

CompileOptions WithPartitions(std::vector<std::string> backends) {
  CompileOptions options;
  options.backend = "interpreter";
  options.partitioning.backends = std::move(backends);
  options.partitioning.log = false;
  return options;
}

// Compiles @forward of `file` with and without the megakernel partition backend and runs both
// on the same random inputs for `steps` steps, each step's next tokens fed back one position
// further: the outputs agree within `tolerance` of the largest (the tokens exactly).
void CheckDecodeAgainstTheInterpreter(absl::string_view file, double tolerance, int steps) {
#if TORCH_VERSION_MAJOR < 2
  GTEST_SKIP() << "the graphs were dumped with LibTorch 2.12, whose CPU attention op LibTorch 1.13 lacks";
#endif
  absl::StatusOr<std::unique_ptr<Module>> module = testing::LoadTestGraph(file);
  ASSERT_TRUE(module.ok()) << module.status();
  absl::StatusOr<DecodeGraphMatch> match = MatchDecodeGraph(*(*module)->FindGraph("forward"));
  ASSERT_TRUE(match.ok()) << match.status();
  std::vector<at::Tensor> inputs = testing::RandomInputs(*(*module)->FindGraph("forward"), *match);
  int tokens_index = -1, positions_index = -1;
  for (size_t i = 0; i < match->tokens->graph()->inputs().size(); ++i) {
    if (match->tokens->graph()->inputs()[i] == match->tokens) tokens_index = static_cast<int>(i);
    if (match->tokens->graph()->inputs()[i] == match->positions) positions_index = static_cast<int>(i);
  }
  inputs[positions_index] = inputs[positions_index] % (match->model.window - steps);

  absl::StatusOr<CompiledStep> claimed = Compile(CloneModule(**module), "forward", WithPartitions({"megakernel"}));
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  ASSERT_EQ(claimed->partitions.size(), 1u) << FormatPartitions(claimed->partitions);
  EXPECT_EQ(claimed->partitions[0].backend, "megakernel");
  // Every node of the step, the caches' index_put included: the step only calls the kernel.
  EXPECT_EQ(claimed->partitions[0].num_nodes, (*module)->FindGraph("forward")->num_nodes())
      << absl::StrJoin(claimed->notes, "\n");
  EXPECT_TRUE(claimed->fallen_back.empty());
  absl::StatusOr<CompiledStep> plain = Compile(CloneModule(**module), "forward", WithPartitions({}));
  ASSERT_TRUE(plain.ok()) << plain.status();
  auto* mega = dynamic_cast<TorchExecutable*>(claimed->executable.get());
  auto* interpreter = dynamic_cast<TorchExecutable*>(plain->executable.get());
  ASSERT_NE(mega, nullptr);
  ASSERT_NE(interpreter, nullptr);

  std::vector<at::Tensor> mega_inputs = Clones(inputs), interpreter_inputs = Clones(inputs);
  const Graph& step = claimed->graph();
  for (int s = 0; s < steps; ++s) {
    absl::StatusOr<std::vector<at::Tensor>> got = mega->Run(mega_inputs);
    absl::StatusOr<std::vector<at::Tensor>> want = interpreter->Run(interpreter_inputs);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_EQ(got->size(), want->size());
    for (size_t o = 0; o < got->size(); ++o) {
      const GraphOutput& output = step.outputs()[o];
      const at::Tensor& a = (*got)[o];
      const at::Tensor& b = (*want)[o];
      ASSERT_EQ(a.sizes(), b.sizes()) << output.name;
      if (b.scalar_type() == at::kLong) {
        EXPECT_TRUE(at::equal(a, b)) << file << " step " << s << ": " << output.name;
      } else {
        EXPECT_LE(MaxDiff(a, b), tolerance * b.to(at::kFloat).abs().max().item<double>())
            << file << " step " << s << ": " << output.name;
      }
      if (output.aliases != nullptr) {
        // Written in place: the output is the donated input itself.
        const auto step_inputs = step.inputs();
        const size_t i = std::find(step_inputs.begin(), step_inputs.end(), output.aliases) - step_inputs.begin();
        EXPECT_TRUE(a.is_same(mega_inputs[i])) << output.name;
        // The interpreter's Run returns a new cache (RunDonating would write it in place).
        interpreter_inputs[i] = b;
      }
      if (a.scalar_type() == at::kLong) {
        // The interpreter's token feeds both, so that a near-tie cannot make them diverge.
        mega_inputs[tokens_index] = b.reshape({-1, 1}).clone();
        interpreter_inputs[tokens_index] = b.reshape({-1, 1}).clone();
      }
    }
    mega_inputs[positions_index] = mega_inputs[positions_index] + 1;
    interpreter_inputs[positions_index] = interpreter_inputs[positions_index] + 1;
  }
}

TEST(MegakernelBackendTest, ClaimsTheDecodeStepAndEqualsTheInterpreterF32) {
  CheckDecodeAgainstTheInterpreter("decode_tiny_f32.mir", 1e-5, 3);
}

TEST(MegakernelBackendTest, ClaimsTheDecodeStepAndEqualsTheInterpreterGqaBf16Batch2) {
  CheckDecodeAgainstTheInterpreter("decode_tiny_gqa_bf16_batch2.mir", 2e-2, 3);
}

TEST(MegakernelBackendTest, DeclinesAPrefillSayingWhyAndItStillRuns) {
#if TORCH_VERSION_MAJOR < 2
  GTEST_SKIP() << "the graphs were dumped with LibTorch 2.12, whose CPU attention op LibTorch 1.13 lacks";
#endif
  absl::StatusOr<std::unique_ptr<Module>> module = testing::LoadTestGraph("prefill_tiny_f32.mir");
  ASSERT_TRUE(module.ok()) << module.status();
  absl::StatusOr<CompiledStep> compiled = Compile(CloneModule(**module), "forward", WithPartitions({"megakernel"}));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_TRUE(compiled->partitions.empty()) << FormatPartitions(compiled->partitions);
  const std::string notes = absl::StrJoin(compiled->notes, "\n");
  EXPECT_NE(notes.find("not a decode step the MegaKernel runs: at %input.0: expected the tokens"), std::string::npos)
      << notes;
}

TEST(MegakernelBackendTest, DeclinesAGraphOnCudaItCannotRunNamingWhy) {
  absl::StatusOr<std::unique_ptr<Module>> module = testing::LoadTestGraph("decode_tiny_f32.mir");
  ASSERT_TRUE(module.ok()) << module.status();
  // The same graph typed for the GPU: every tensor type gains "@cuda".
  const std::string text =
      std::regex_replace(PrintModule(**module), std::regex(R"(((bf16|f32|i64|bool)\[[0-9,]*\]( ?strides\[[0-9,]*\])?))"), "$1@cuda");
  absl::StatusOr<std::unique_ptr<Module>> on_cuda = ParseModule(text);
  ASSERT_TRUE(on_cuda.ok()) << on_cuda.status();
  const Graph& graph = *(*on_cuda)->FindGraph("forward");
  absl::StatusOr<std::unique_ptr<Backend>> backend = Registry<Backend>::Global().Create("megakernel");
  ASSERT_TRUE(backend.ok()) << backend.status();
  const Capability capability = (*backend)->GetCapability(**on_cuda, graph);
  ASSERT_EQ(capability.unsupported.size(), static_cast<size_t>(graph.num_nodes()));
  const std::string& reason = capability.unsupported[0].second;
  if (HasCudaKernel()) {
    EXPECT_NE(reason.find("the CUDA kernel takes bf16; the rope cosines %rope_cos is f32[64,8]@cuda"),
              std::string::npos)
        << reason;
  } else {
    EXPECT_NE(reason.find("this build has no CUDA kernel (--config=cuda)"), std::string::npos) << reason;
  }
}

TEST(MegakernelBackendTest, TimelinesComeOnlyFromTheKernel) {
#if TORCH_VERSION_MAJOR < 2
  GTEST_SKIP() << "the graphs were dumped with LibTorch 2.12, whose CPU attention op LibTorch 1.13 lacks";
#endif
  absl::StatusOr<std::unique_ptr<Module>> module = testing::LoadTestGraph("decode_tiny_f32.mir");
  ASSERT_TRUE(module.ok()) << module.status();
  absl::StatusOr<CompiledStep> compiled = Compile(CloneModule(**module), "forward", WithPartitions({"megakernel"}));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  ASSERT_EQ(compiled->partition_executables.size(), 1u);
  const Executable& mega = *compiled->partition_executables.begin()->second;
  EXPECT_EQ(WriteLastStepTimeline(mega, "/dev/null").status().message(),
            "the megakernel executable has run no step on CUDA: only the kernel records a timeline");
  EXPECT_EQ(WriteLastStepTimeline(*compiled->executable, "/dev/null").status().message(),
            "a timeline needs a megakernel executable, not one of 'interpreter'");
}

TEST(MegakernelBackendTest, APositionOutsideTheWindowIsRefused) {
#if TORCH_VERSION_MAJOR < 2
  GTEST_SKIP() << "the graphs were dumped with LibTorch 2.12, whose CPU attention op LibTorch 1.13 lacks";
#endif
  absl::StatusOr<std::unique_ptr<Module>> module = testing::LoadTestGraph("decode_tiny_f32.mir");
  ASSERT_TRUE(module.ok()) << module.status();
  const Graph& graph = *(*module)->FindGraph("forward");
  absl::StatusOr<DecodeGraphMatch> match = MatchDecodeGraph(graph);
  ASSERT_TRUE(match.ok()) << match.status();
  std::vector<at::Tensor> inputs = testing::RandomInputs(graph, *match);
  absl::StatusOr<CompiledStep> compiled = Compile(CloneModule(**module), "forward", WithPartitions({"megakernel"}));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  auto* mega = dynamic_cast<TorchExecutable*>(compiled->partition_executables.begin()->second.get());
  ASSERT_NE(mega, nullptr);
  const Graph& callee = *compiled->module().FindGraph(compiled->partitions[0].callee);
  for (size_t i = 0; i < graph.inputs().size(); ++i) {
    if (graph.inputs()[i] == match->positions) inputs[i].fill_(match->model.window);
  }
  // The partition's inputs by name, from the step's.
  std::vector<at::Tensor> callee_inputs;
  for (const Value* input : callee.inputs()) {
    for (size_t i = 0; i < graph.inputs().size(); ++i) {
      if (graph.inputs()[i]->name() == input->name()) callee_inputs.push_back(inputs[i]);
    }
  }
  ASSERT_EQ(callee_inputs.size(), callee.inputs().size());
  absl::StatusOr<std::vector<at::Tensor>> run = mega->Run(callee_inputs);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(run.status().message(), "a position outside [0, 32): the step's positions span [32, 32]");
}

TEST(MegakernelBackendTest, OptionsAreCheckedNamingTheKey) {
  auto create = [](ComponentOptions options) { return Registry<Backend>::Global().Create("megakernel", options).status(); };
  EXPECT_TRUE(create({{"num_sms", "8"}, {"check", "false"}, {"tile_rows", "32"}, {"attention_splits", "4"},
                      {"stage_inputs", "false"}, {"stream_weights", "false"}}).ok());
  EXPECT_TRUE(create({{"tensor_cores", "true"}}).ok());
  EXPECT_EQ(create({{"tensor_cores", "true"}, {"stage_inputs", "false"}}).message(),
            "megakernel: tensor_cores=true takes staged inputs (not stage_inputs=false)");
  EXPECT_EQ(create({{"sms", "8"}}).message(),
            "megakernel: unknown option 'sms' (options: num_sms, tile_rows, attention_splits, check, stage_inputs, stream_weights, tensor_cores)");
  EXPECT_EQ(create({{"num_sms", "-1"}}).message(), "megakernel: num_sms=-1 is not a non-negative integer");
  EXPECT_EQ(create({{"check", "yes"}}).message(), "megakernel: check=yes is not true or false");
}

}  // namespace
}  // namespace magi::megakernel
