// PyTorch's own graphs of third-party models, exported by tools/fx_export.py (Debian's
// PyTorch 1.13, at build time), imported, run by the interpreter and compared with what
// PyTorch computed eagerly: forward outputs, and for joint graphs the loss, every
// parameter gradient autograd produced, and BatchNorm's updated running statistics.
#include <torch/torch.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/cost/cost_model.h"
#include "magi/frontend/fx/fx_importer.h"
#include "magi/ir/collectives.h"
#include "magi/ir/graph_utils.h"
#include "magi/ir/printer.h"
#include "magi/passes/auto_recompute.h"
#include "magi/runtime/gloo/gloo_communicator.h"
#include "magi/backend/torch_executable.h"

namespace magi {
namespace {

struct Case {
  std::string model;
  std::string mode;
  std::string dir = "exported";  // built by the genrules with PyTorch 1.13; "testdata": exported with 2.11
};

std::string PrintTo(const Case& c) { return c.model + "_" + c.mode; }

class FxImportTest : public ::testing::TestWithParam<Case> {};

// Runs `imported` on its recorded inputs (collectives through `communicator`, if given)
// and compares every output with PyTorch's eager result.
void ExpectSameAsPyTorch(const FxImport& imported, const std::string& label,
                         std::shared_ptr<Communicator> communicator = nullptr) {
  const Graph& graph = imported.graph();
  std::vector<at::Tensor> inputs;
  for (const Value* input : graph.inputs()) {
    auto it = imported.tensors.find(input->name());
    ASSERT_NE(it, imported.tensors.end()) << "no tensor for input %" << input->name();
    inputs.push_back(it->second);
  }
  absl::StatusOr<std::unique_ptr<TorchExecutable>> executable =
      CompileForTorch("interpreter", *imported.module, imported.graph_name);
  ASSERT_TRUE(executable.ok()) << executable.status();
  if (communicator != nullptr) {
    for (const auto& group : imported.module->process_groups()) {
      ASSERT_TRUE((*executable)->BindCommunicator(group->name, communicator).ok());
    }
  }
  absl::StatusOr<std::vector<at::Tensor>> outputs = (*executable)->Run(inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  int compared = 0;
  double worst = 0;
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    const std::string& name = graph.outputs()[i].name;
    auto expected = imported.tensors.find("expected:" + name);
    ASSERT_NE(expected, imported.tensors.end()) << "PyTorch recorded no output '" << name << "'";
    const at::Tensor& got = (*outputs)[i];
    ASSERT_EQ(got.sizes(), expected->second.sizes()) << name;
    double scale = std::max(1.0, expected->second.abs().max().item<double>());
    double diff = (got.to(torch::kDouble) - expected->second.to(torch::kDouble)).abs().max().item<double>() / scale;
    worst = std::max(worst, diff);
    EXPECT_LE(diff, 2e-5) << label << ": output '" << name << "' differs by " << diff << " (relative to its max)";
    ++compared;
  }
  // Every expected value was checked: all gradients autograd made, all updated buffers.
  int expected_count = 0;
  for (const auto& [name, tensor] : imported.tensors) expected_count += name.rfind("expected:", 0) == 0;
  EXPECT_EQ(compared, expected_count);
  std::cout << label << " (torch " << imported.torch_version << "): " << graph.num_nodes() << " nodes, " << compared
            << " outputs within " << worst << " of PyTorch\n";
}

TEST_P(FxImportTest, RunsLikePyTorch) {
  const Case& c = GetParam();
  absl::StatusOr<FxImport> imported = ImportFxFile("magi/frontend/fx/" + c.dir + "/" + PrintTo(c) + ".fx.json");
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->kind, c.mode);
  ExpectSameAsPyTorch(*imported, PrintTo(c));
}

// Magi's passes on a third-party model: AutoRecompute on resnet18's joint graph, to a budget
// halfway between its peak and the least recompute reaches, must keep every output (loss,
// gradients, running statistics) bitwise and lower the peak the interpreter measures.
TEST(FxImportPassesTest, AutoRecomputeOnResnet18KeepsGradientsAndLowersThePeak) {
  absl::StatusOr<FxImport> plain = ImportFxFile("magi/frontend/fx/exported/resnet18_joint.fx.json");
  absl::StatusOr<FxImport> optimized = ImportFxFile("magi/frontend/fx/exported/resnet18_joint.fx.json");
  ASSERT_TRUE(plain.ok() && optimized.ok()) << plain.status();
  AutoRecompute floor_finder(1, CostModel(*LoadDeviceProfile("cpu")));
  std::unique_ptr<Module> probe = CloneModule(*optimized->module);
  ASSERT_FALSE(floor_finder.Run(*probe).ok());
  const int64_t budget = (floor_finder.report().peak_before + floor_finder.report().peak_floor) / 2;
  AutoRecompute pass(budget, CostModel(*LoadDeviceProfile("cpu")));
  absl::StatusOr<bool> changed = pass.Run(*optimized->module);
  ASSERT_TRUE(changed.ok()) << changed.status();
  ASSERT_TRUE(*changed);
  EXPECT_GT(pass.report().recomputed, 0);

  auto run = [](const FxImport& imported, int64_t* peak) {
    std::vector<at::Tensor> inputs;
    for (const Value* input : imported.graph().inputs()) inputs.push_back(imported.tensors.at(input->name()));
    auto executable = CompileForTorch("interpreter", *imported.module, imported.graph_name);
    EXPECT_TRUE(executable.ok()) << executable.status();
    auto outputs = (*executable)->Run(inputs);
    EXPECT_TRUE(outputs.ok()) << outputs.status();
    *peak = (*executable)->last_run_stats().peak_live_bytes;
    return *outputs;
  };
  int64_t plain_peak = 0, optimized_peak = 0;
  std::vector<at::Tensor> expected = run(*plain, &plain_peak);
  std::vector<at::Tensor> got = run(*optimized, &optimized_peak);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(at::equal(got[i], expected[i])) << plain->graph().outputs()[i].name;
  }
  std::cout << "resnet18 joint: " << pass.report().recomputed << " nodes recomputed; peak " << plain_peak << " -> "
            << optimized_peak << " bytes measured (budget " << budget << ", predicted " << pass.report().peak_after
            << ")\n";
  EXPECT_LT(optimized_peak, plain_peak);
  EXPECT_LE(optimized_peak, budget + budget / 200);
}

TEST(FxImport2xTest, TorchExportAndMakeFxGraphsFromPyTorch2) {
  for (const char* name : {"llama_export_2x", "llama_joint_2x"}) {
    absl::StatusOr<FxImport> imported = ImportFxFile(std::string("magi/frontend/fx/testdata/") + name + ".fx.json");
    ASSERT_TRUE(imported.ok()) << imported.status();
    EXPECT_EQ(imported->torch_version.substr(0, 4), "2.11");
    ExpectSameAsPyTorch(*imported, name);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, FxImportTest,
                         ::testing::Values(Case{"resnet18", "forward"}, Case{"resnet18", "joint"},
                                           Case{"mobilenet_v2", "forward"}, Case{"mobilenet_v2", "joint"},
                                           Case{"vit", "forward"}, Case{"vit", "joint"}, Case{"llama", "forward"},
                                           Case{"llama", "joint"}),
                         [](const ::testing::TestParamInfo<Case>& info) { return PrintTo(info.param); });

TEST(FxImportErrorsTest, MalformedFilesNameTheProblem) {
  auto not_json = ImportFxJson("{nodes: [", "bad.fx.json");
  ASSERT_FALSE(not_json.ok());
  EXPECT_NE(not_json.status().message().find("bad.fx.json: not a valid magi-fx JSON file"), std::string::npos)
      << not_json.status();
  auto wrong_format = ImportFxJson(R"({"format": "onnx", "version": 1})", "x.json");
  ASSERT_FALSE(wrong_format.ok());
  EXPECT_NE(wrong_format.status().message().find("not a magi-fx version 1 file"), std::string::npos);
  auto unknown_op = ImportFxJson(R"({"format": "magi-fx", "version": 1, "torch_version": "9.9", "nodes": [
      {"name": "x", "op": "placeholder", "meta": [{"dtype": "float32", "shape": [2]}]},
      {"name": "y", "op": "call_function", "target": "aten::frobnicate", "args": [{"node": "x"}],
       "meta": [{"dtype": "float32", "shape": [2]}]},
      {"name": "output", "op": "output", "args": [{"list": {"items": [{"node": "y"}]}}]}]})",
                                 "u.json");
  ASSERT_FALSE(unknown_op.ok());
  EXPECT_NE(unknown_op.status().message().find("node 'y' (call_function aten::frobnicate): LibTorch"),
            std::string::npos)
      << unknown_op.status();
  EXPECT_NE(unknown_op.status().message().find("exported with torch 9.9"), std::string::npos);
  auto dangling = ImportFxJson(R"({"format": "magi-fx", "version": 1, "nodes": [
      {"name": "y", "op": "call_function", "target": "aten::relu", "args": [{"node": "nope"}],
       "meta": [{"dtype": "float32", "shape": [2]}]}]})",
                               "d.json");
  ASSERT_FALSE(dangling.ok());
  EXPECT_NE(dangling.status().message().find("unknown node 'nope'"), std::string::npos) << dangling.status();
  auto bad_arg = ImportFxJson(R"({"format": "magi-fx", "version": 1, "nodes": [
      {"name": "x", "op": "placeholder", "meta": [{"dtype": "float32", "shape": [2, 3]}]},
      {"name": "y", "op": "call_function", "target": "aten::sum.dim_IntList", "args": [{"node": "x"}, {"s": "one"}],
       "meta": [{"dtype": "float32", "shape": [2]}]}]})",
                              "a.json");
  ASSERT_FALSE(bad_arg.ok());
  EXPECT_NE(bad_arg.status().message().find("argument 'dim'"), std::string::npos) << bad_arg.status();
  EXPECT_EQ(ImportFxFile("/nonexistent/m.fx.json").status().code(), absl::StatusCode::kNotFound);
}

// In-place ops become functional; a written input comes back as "<input>.updated".
TEST(FxImportErrorsTest, InPlaceOpsBecomeFunctional) {
  auto imported = ImportFxJson(R"({"format": "magi-fx", "version": 1, "graph_name": "forward", "nodes": [
      {"name": "x", "op": "placeholder", "role": "data", "meta": [{"dtype": "float32", "shape": [3]}]},
      {"name": "stat", "op": "placeholder", "role": "buffer", "meta": [{"dtype": "float32", "shape": [3]}]},
      {"name": "add_", "op": "call_function", "target": "aten::add_.Tensor", "args": [{"node": "stat"}, {"node": "x"}],
       "meta": [{"dtype": "float32", "shape": [3]}]},
      {"name": "relu", "op": "call_function", "target": "aten::relu", "args": [{"node": "stat"}],
       "meta": [{"dtype": "float32", "shape": [3]}]},
      {"name": "output", "op": "output", "args": [{"list": {"items": [{"node": "relu"}]}}]}],
      "output_names": ["y"]})",
                               "inplace.json");
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(PrintModule(*imported->module), R"(module @forward {
  graph @forward {
    input %x: f32[3]
    input %stat: f32[3] {role = buffer}
    %add_ = aten::add.Tensor(%stat, %x, alpha = 1) : f32[3]
    %relu = aten::relu(%add_) : f32[3]
    output y = %relu
    output stat.updated = %add_
  }
}
)");
}

// A graph with functional collectives (FSDP-style: gather the weight shard, reduce-scatter
// the gradient), as PyTorch 2.x's make_fx writes it; checked-in fixture exported on the GPU
// machine (tools/fx_models.py:fsdp_collectives).
TEST(FxImport2xTest, FunctionalCollectivesBecomeMagiCollectives) {
  auto imported = ImportFxFile("magi/frontend/fx/testdata/funcol_2x.fx.json");
  ASSERT_TRUE(imported.ok()) << imported.status();
  int gathers = 0, scatters = 0, waits = 0;
  for (const Node* node : imported->graph().nodes()) {
    gathers += node->op() == kAllGatherStartOp;
    scatters += node->op() == kReduceScatterStartOp;
    waits += node->op() == kWaitOp;
  }
  EXPECT_EQ(gathers, 1);
  EXPECT_EQ(scatters, 1);
  EXPECT_EQ(waits, 2);
  // The exporter traced it as one Gloo rank; run it the same way, through Magi's Gloo communicator.
  auto communicator =
      CreateGlooCommunicator(c10::make_intrusive<c10d::HashStore>(), 0, 1, "funcol", std::chrono::seconds(30));
  ASSERT_TRUE(communicator.ok()) << communicator.status();
  ExpectSameAsPyTorch(*imported, "funcol_2x", *communicator);
}

}  // namespace
}  // namespace magi
