// The captured training step of the tiny Llama compiled with the "inductor" partition
// backend (AOTInductor packages made at compile time by the Python of the LibTorch in use)
// and the interpreter as primary, against the interpreter alone on the same inputs.
//
// On a LibTorch with AOTInductor (CI's 2.12 and 2.11 legs) the partitions are compiled,
// cached and run from C++; on Debian's 1.13 the backend says it is unavailable and the
// driver leaves the step to the interpreter. Either way the step's results must match.
#include <sys/stat.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "magi/backend/inductor/inductor_backend.h"
#include "magi/backend/inductor/inductor_executable.h"
#include "magi/backend/torch_executable.h"
#include "magi/base/file.h"
#include "magi/compat/aoti_package.h"
#include "magi/compiler/compiler.h"
#include "magi/frontend/capture/capture.h"
#include "magi/ir/graph_utils.h"
#include "magi/ir/magi_ops.h"
#include "magi/ir/parser.h"
#include "magi/models/llama.h"

namespace magi {
namespace {

// fp32 on the CPU. Inductor fuses elementwise chains and reorders reductions (sums,
// softmax, the norms, the matmul tiles of its own kernels), so results are not bitwise
// those of ATen's kernels; relative to the largest magnitude of each output they agree
// within this (measured: see docs/backends.md).
constexpr double kTolerance = 1e-6;

std::string TempDir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(root != nullptr ? root : "/tmp", "/", name);
  EXPECT_EQ(std::system(absl::StrCat("rm -rf '", dir, "' && mkdir -p '", dir, "'").c_str()), 0);
  return dir;
}

struct Step {
  CapturedGraph captured;
  std::vector<at::Tensor> inputs;
};

// The tiny Llama with one layer: every kind of op of the step (embedding, norms, attention,
// MLP, loss and their backward) in half the nodes of two layers, so that Inductor compiles
// two partitions of at most 150 nodes instead of three (each ~7 s of CPU).
Step CaptureTinyLlamaStep() {
  torch::manual_seed(0);
  models::LlamaConfig config = models::LlamaConfig::Tiny();
  config.n_layers = 1;
  models::Llama model(config);
  at::Tensor tokens = torch::randint(0, 256, {2, 16}, torch::kLong);
  at::Tensor targets = torch::randint(0, 256, {2, 16}, torch::kLong);
  absl::StatusOr<CapturedGraph> captured = CaptureTrainingStep(
      *model, [&](const std::vector<at::Tensor>& in) { return models::LanguageModelLoss(model->forward(in[0]), in[1]); },
      {tokens, targets});
  EXPECT_TRUE(captured.ok()) << captured.status();
  absl::StatusOr<std::vector<at::Tensor>> inputs = BindInputs(*captured, *model, {tokens, targets});
  EXPECT_TRUE(inputs.ok()) << inputs.status();
  return {*std::move(captured), *std::move(inputs)};
}

struct Outcome {
  CompiledStep compiled;
  std::vector<at::Tensor> outputs;
  double compile_seconds = 0;
};

Outcome CompileAndRun(const Step& step, const CompileOptions& options) {
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<CompiledStep> compiled = Compile(CloneModule(*step.captured.module), step.captured.graph_name, options);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  if (!compiled.ok()) return {};
  auto* executable = dynamic_cast<TorchExecutable*>(compiled->executable.get());
  EXPECT_NE(executable, nullptr);
  absl::StatusOr<std::vector<at::Tensor>> outputs = executable->Run(step.inputs);
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  return {*std::move(compiled), outputs.ok() ? *outputs : std::vector<at::Tensor>(), seconds};
}

// `jobs`: compile processes (0: the backend's default, the hardware threads).
CompileOptions InductorOptions(const std::string& cache_dir, int max_nodes, int jobs = 0) {
  CompileOptions options;
  options.partitioning.backends = {"inductor"};
  options.partitioning.backend_options["inductor"] = {{"cache_dir", cache_dir}};
  if (jobs > 0) options.partitioning.backend_options["inductor"]["jobs"] = std::to_string(jobs);
  options.partitioning.max_nodes = max_nodes;
  return options;
}

// Largest |a - b| over every output, relative to the output's largest magnitude (>= 1).
double WorstRelativeDifference(const Outcome& reference, const Outcome& other) {
  double worst = 0;
  for (size_t i = 0; i < reference.outputs.size(); ++i) {
    at::Tensor a = reference.outputs[i].to(torch::kDouble), b = other.outputs[i].to(torch::kDouble);
    double scale = std::max(1.0, a.abs().max().item<double>());
    double diff = (a - b).abs().max().item<double>() / scale;
    EXPECT_LE(diff, kTolerance) << reference.compiled.graph().outputs()[i].name << " differs by " << diff;
    worst = std::max(worst, diff);
  }
  return worst;
}

TEST(InductorStepTest, TinyLlamaStepMatchesTheInterpreter) {
  Step step = CaptureTinyLlamaStep();
  std::string cache = TempDir("inductor_cache");
  Outcome reference = CompileAndRun(step, CompileOptions());
  ASSERT_FALSE(reference.outputs.empty());
  // Bounded partitions (the option exists so that no single program takes minutes to compile).
  // One compile process: each process pays Inductor's start (importing torch, probing the CPU's
  // vector ISAs with the compiler) and a test has one core under CI (56 -> 42 s of CPU with the
  // default two on 2 cores). Several workers sharing one compile are aoti_compile_test.py's; the
  // failing compile below runs the default number.
  constexpr int kMaxNodes = 150;
  Outcome cold = CompileAndRun(step, InductorOptions(cache, kMaxNodes, /*jobs=*/1));
  ASSERT_EQ(cold.outputs.size(), reference.outputs.size());

  if (!compat::AotInductorAvailable()) {
    // Debian's 1.13: the backend declines everything, saying why; the interpreter runs the step.
    EXPECT_TRUE(cold.compiled.partitions.empty());
    ASSERT_FALSE(cold.compiled.notes.empty());
    EXPECT_NE(cold.compiled.notes[0].find("it declines every node: AOTInductor is unavailable: LibTorch " +
                                          std::string(TORCH_VERSION) + " has no AOTInductor"),
              std::string::npos)
        << cold.compiled.notes[0];
    for (size_t i = 0; i < reference.outputs.size(); ++i) {
      EXPECT_TRUE(torch::equal(reference.outputs[i], cold.outputs[i])) << reference.compiled.graph().outputs()[i].name;
    }
    return;
  }

  // Every compute node between the step's inputs and outputs went to Inductor: the tiny
  // Llama step has no collectives and nothing random.
  ASSERT_FALSE(cold.compiled.partitions.empty());
  EXPECT_TRUE(cold.compiled.fallen_back.empty()) << cold.compiled.notes.back();
  int calls = 0, other = 0;
  for (const Node* node : cold.compiled.graph().nodes()) node->op() == kCallOp ? ++calls : ++other;
  EXPECT_EQ(calls, static_cast<int>(cold.compiled.partitions.size()));
  EXPECT_GE(cold.compiled.partitions.size(), 2u) << "the step should need more than one bounded partition";
  for (const Partition& partition : cold.compiled.partitions) EXPECT_LE(partition.num_nodes, kMaxNodes);
  std::cout << FormatPartitions(cold.compiled.partitions) << other << " nodes left to the interpreter\n";
  for (const std::string& note : cold.compiled.notes) std::cout << "note: " << note << "\n";
  for (const auto& [callee, executable] : cold.compiled.partition_executables) {
    auto* inductor = dynamic_cast<inductor::InductorExecutable*>(executable.get());
    ASSERT_NE(inductor, nullptr) << callee;
    EXPECT_FALSE(inductor->from_cache()) << callee;
    struct stat info;
    EXPECT_EQ(stat(inductor->package_path().c_str(), &info), 0) << inductor->package_path();
    absl::StatusOr<std::string> program = ReadFile(inductor->info().program_path);
    ASSERT_TRUE(program.ok()) << program.status();
    // Parameters enter as inputs: no tensor constants in the program.
    EXPECT_EQ(program->find("_tensor_constant"), std::string::npos);
    EXPECT_EQ(program->find("get_attr"), std::string::npos);
  }
  double worst = WorstRelativeDifference(reference, cold);

  // Compiled again with the same cache: every package comes from the cache, same results.
  Outcome cached = CompileAndRun(step, InductorOptions(cache, kMaxNodes, /*jobs=*/1));
  ASSERT_EQ(cached.outputs.size(), reference.outputs.size());
  EXPECT_EQ(cached.compiled.partitions.size(), cold.compiled.partitions.size());
  for (const auto& [callee, executable] : cached.compiled.partition_executables) {
    auto* inductor = dynamic_cast<inductor::InductorExecutable*>(executable.get());
    ASSERT_NE(inductor, nullptr) << callee;
    EXPECT_TRUE(inductor->from_cache()) << callee;
  }
  for (size_t i = 0; i < cold.outputs.size(); ++i) {
    EXPECT_TRUE(torch::equal(cold.outputs[i], cached.outputs[i])) << cold.compiled.graph().outputs()[i].name;
  }
  std::cout << "inductor vs interpreter: " << reference.outputs.size() << " outputs (loss and every gradient) within "
            << worst << " (relative to each output's largest magnitude); compile cold " << cold.compile_seconds
            << " s, cached " << cached.compile_seconds << " s (interpreter alone " << reference.compile_seconds
            << " s)\n";
}

// A partition whose compile fails falls back to the interpreter with a warning naming it.
// The failure is real: the Python that compiles exits with an error (a stand-in that runs
// the real interpreter for the probe only).
// A KV cache's update (aten::index_put over a donated cache, the generation graphs' write)
// goes into the partition that makes the new keys: the package writes the cache in place,
// fused into that kernel, and the call returns the caller's cache tensor, written.
TEST(InductorStepTest, DonatedCacheIsUpdatedInPlaceInsideAPartition) {
  if (!compat::AotInductorAvailable()) GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no AOTInductor";
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(R"(module @m {
  graph @decode {
    input %cache: f32[2,4,8,16]
    input %rows: i64[2,1,1]
    input %heads: i64[1,4,1]
    input %positions: i64[2,1,1]
    input %x: f32[2,64]
    input %w: f32[64,64] {role = param}
    %k = aten::mm(%x, %w) : f32[2,64]
    %k4 = aten::view(%k, [2, 4, 1, 16]) : f32[2,4,1,16]
    %kr = aten::mul.Scalar(%k4, 2) : f32[2,4,1,16]
    %new = aten::index_put(%cache, [%rows, %heads, %positions], %kr, false) : f32[2,4,8,16]
    %s = aten::sum.dim_IntList(%new, [2], false, dtype = none) : f32[2,4,16]
    output s = %s
    output cache = %new {aliases = %cache}
  }
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  torch::manual_seed(3);
  const at::Tensor cache = torch::randn({2, 4, 8, 16});
  const at::Tensor rows = torch::arange(2).view({2, 1, 1}), heads = torch::arange(4).view({1, 4, 1});
  const at::Tensor positions = torch::tensor({5, 2}, torch::kLong).view({2, 1, 1});
  const at::Tensor x = torch::randn({2, 64}), w = torch::randn({64, 64});
  const at::Tensor expected =
      cache.index_put({rows, heads, positions}, torch::mm(x, w).view({2, 4, 1, 16}) * 2);

  absl::StatusOr<CompiledStep> compiled =
      Compile(std::move(*module), "decode", InductorOptions(TempDir("inductor_in_place"), 0));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  for (const std::string& note : compiled->notes) EXPECT_EQ(note.find("writes a donated input"), std::string::npos) << note;
  for (const Node* node : compiled->graph().nodes()) EXPECT_NE(node->op(), "aten::index_put") << "left outside";
  ASSERT_EQ(compiled->partitions.size(), 1u);
  auto* executable = dynamic_cast<TorchExecutable*>(compiled->executable.get());
  ASSERT_NE(executable, nullptr);
  at::Tensor donated = cache.clone();
  absl::StatusOr<std::vector<at::Tensor>> outputs = executable->Run({donated, rows, heads, positions, x, w});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  ASSERT_EQ(outputs->size(), 2u);
  EXPECT_EQ((*outputs)[1].data_ptr(), donated.data_ptr()) << "the new cache is not the donated storage";
  EXPECT_TRUE(torch::allclose(donated, expected, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose((*outputs)[0], expected.sum(2), 1e-5, 1e-5));
  // Only the written positions changed.
  at::Tensor written = torch::zeros({2, 4, 8}, torch::kBool).index_put_({rows, heads, positions}, true);
  EXPECT_TRUE(torch::equal(donated.masked_select(~written.unsqueeze(-1).expand_as(donated)),
                           cache.masked_select(~written.unsqueeze(-1).expand_as(cache))));
}

TEST(InductorStepTest, PartitionsThatFailToCompileFallBack) {
  if (!compat::AotInductorAvailable()) GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no AOTInductor";
  std::string dir = TempDir("inductor_failing");
  inductor::InductorBackend probe({});
  ASSERT_TRUE(probe.Availability().ok()) << probe.Availability();
  std::string python = dir + "/python_that_crashes";
  ASSERT_TRUE(WriteFileAtomically(python, absl::StrCat("#!/bin/sh\nif [ \"$2\" = --probe ]; then exec ",
                                                       probe.python(), " \"$@\"; fi\n",
                                                       "echo 'simulated crash of the compiler' >&2\nexit 3\n"))
                  .ok());
  ASSERT_EQ(chmod(python.c_str(), 0755), 0);

  Step step = CaptureTinyLlamaStep();
  Outcome reference = CompileAndRun(step, CompileOptions());
  CompileOptions options = InductorOptions(dir + "/cache", 100);
  options.partitioning.backend_options["inductor"]["python"] = python;
  Outcome failed = CompileAndRun(step, options);
  EXPECT_TRUE(failed.compiled.partitions.empty());
  ASSERT_FALSE(failed.compiled.fallen_back.empty());
  int warnings = 0;
  for (const std::string& note : failed.compiled.notes) {
    if (note.rfind("warning: partition @", 0) != 0) continue;
    ++warnings;
    EXPECT_NE(note.find("failed to compile on backend 'inductor'; the primary backend 'interpreter' runs its nodes: "),
              std::string::npos)
        << note;
    EXPECT_NE(note.find("the compile process wrote no result"), std::string::npos) << note;
  }
  EXPECT_EQ(warnings, static_cast<int>(failed.compiled.fallen_back.size()));
  for (const Node* node : failed.compiled.graph().nodes()) EXPECT_NE(node->op(), kCallOp);
  ASSERT_EQ(failed.outputs.size(), reference.outputs.size());
  for (size_t i = 0; i < reference.outputs.size(); ++i) {
    EXPECT_TRUE(torch::equal(reference.outputs[i], failed.outputs[i])) << reference.compiled.graph().outputs()[i].name;
  }
}

}  // namespace
}  // namespace magi
