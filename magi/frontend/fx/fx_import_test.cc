// PyTorch's own graphs of third-party models, exported by tools/fx_export.py (Debian's
// PyTorch 1.13, at build time), imported, run by the interpreter and compared with what
// PyTorch computed eagerly: forward outputs, and for joint graphs the loss, every
// parameter gradient autograd produced, and BatchNorm's updated running statistics.
#include <ATen/ATen.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/cost/cost_model.h"
#include "magi/frontend/fx/fx_check.h"
#include "magi/frontend/fx/fx_importer.h"
#include "magi/ir/collectives.h"
#include "magi/ir/graph_utils.h"
#include "magi/ir/printer.h"
#include "magi/passes/auto_recompute.h"
#include "magi/runtime/gloo/gloo_communicator.h"
#include "magi/backend/torch_executable.h"

namespace magi {
namespace {

// The models' tolerance is what was measured (docs/fx.md): bitwise, except the Llama twin's
// joint graph (5.6e-9 relative on 1.13) and the LSTM and GRU forward graphs, bitwise on 1.13
// but 7.5e-9 and 1.5e-8 relative on 2.12 (CI, 2026-12-02); issue 15 asks 1e-5 at most.
constexpr double kBitwise = 0;

struct Case {
  std::string model;
  std::string mode;
  double tolerance = kBitwise;  // relative to each output's largest magnitude
  std::string dir = "exported";  // built by the genrules with PyTorch 1.13; "testdata": exported with 2.11
};

std::string PrintTo(const Case& c) { return c.model + "_" + c.mode; }

class FxImportTest : public ::testing::TestWithParam<Case> {};

// Runs `imported` on its recorded inputs (collectives through `communicator`, if given)
// twice and compares every output with PyTorch's eager result to `tolerance`; every value
// PyTorch recorded must be compared (RunAndCompare fails otherwise).
void ExpectSameAsPyTorch(const FxImport& imported, const std::string& label, double tolerance,
                         std::shared_ptr<Communicator> communicator = nullptr) {
  FxCheckOptions options;
  options.runs = 2;
  options.tolerance = tolerance;
  options.communicator = std::move(communicator);
  absl::StatusOr<FxCheck> check = RunAndCompare(imported, options);
  ASSERT_TRUE(check.ok()) << label << ": " << check.status();
  for (const std::string& failure : check->failures) ADD_FAILURE() << label << ": " << failure;
  std::cout << label << " (torch " << imported.torch_version << "): " << check->nodes << " nodes, " << check->compared
            << " outputs within " << check->worst << " of PyTorch\n";
}

TEST_P(FxImportTest, RunsLikePyTorch) {
  const Case& c = GetParam();
  absl::StatusOr<FxImport> imported = ImportFxFile("magi/frontend/fx/" + c.dir + "/" + PrintTo(c) + ".fx.json");
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->kind, c.mode);
  ExpectSameAsPyTorch(*imported, PrintTo(c), c.tolerance);
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
    // PyTorch 2.11's eager kernels against 1.13's: 1.5e-7 measured.
    ExpectSameAsPyTorch(*imported, name, 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, FxImportTest,
                         ::testing::Values(Case{"resnet18", "forward"}, Case{"resnet18", "joint"},
                                           Case{"mobilenet_v2", "forward"}, Case{"mobilenet_v2", "joint"},
                                           Case{"vit", "forward"}, Case{"vit", "joint"}, Case{"llama", "forward"},
                                           Case{"llama", "joint", 1e-7}, Case{"view_write", "forward"},
                                           Case{"view_write", "joint"}, Case{"buffer_slice_write", "forward"},
                                           Case{"buffer_slice_write", "joint"}, Case{"instance_norm_stats", "forward"},
                                           Case{"instance_norm_stats", "joint"}, Case{"constant", "forward"},
                                           Case{"constant", "joint"}, Case{"lstm", "forward", 1e-7}, Case{"lstm", "joint"},
                                           Case{"gru", "forward", 1e-7}, Case{"gru", "joint"},
                                           Case{"embedding_bag", "forward"}, Case{"embedding_bag", "joint"},
                                           Case{"convnext", "forward"}, Case{"convnext", "joint"},
                                           Case{"swin", "forward"}, Case{"swin", "joint"},
                                           Case{"complex_half", "forward"}, Case{"complex_half", "joint"},
                                           Case{"permuted_view_write", "forward"},
                                           Case{"permuted_view_write", "joint"}),
                         [](const ::testing::TestParamInfo<Case>& info) { return PrintTo(info.param); });

// tools/fx_export_test_models.py: sgn's gradient is a ZeroTensor (aten::_efficientzerotensor, no
// storage), which the exporter once could not record at all.
INSTANTIATE_TEST_SUITE_P(ZeroTensors, FxImportTest,
                         ::testing::Values(Case{"zero_gradient", "forward"}, Case{"zero_gradient", "joint"}),
                         [](const ::testing::TestParamInfo<Case>& info) { return PrintTo(info.param); });

#if TORCH_VERSION_MAJOR >= 2
// PyTorch 2.x's batch norm ops that declare their writes to the running statistics
// (_batch_norm_with_update, _native_batch_norm_legit in training and in inference), which the
// importer once refused: their running statistics come back as "<buffer>.updated".
INSTANTIATE_TEST_SUITE_P(BatchNorm2x, FxImportTest,
                         ::testing::Values(Case{"batch_norm_2x", "forward"}, Case{"batch_norm_2x", "joint"}),
                         [](const ::testing::TestParamInfo<Case>& info) { return PrintTo(info.param); });

// An op that writes arguments it does not return imports as its _functional variant, whose
// extra results are the written arguments' new values.
TEST(FxImport2xTest, BatchNormLegitBecomesItsFunctionalVariant) {
  auto imported = ImportFxJson(R"({"format": "magi-fx", "version": 1, "graph_name": "forward", "nodes": [
      {"name": "x", "op": "placeholder", "role": "data", "meta": [{"dtype": "float32", "shape": [2, 3]}]},
      {"name": "mean", "op": "placeholder", "role": "buffer", "meta": [{"dtype": "float32", "shape": [3]}]},
      {"name": "var", "op": "placeholder", "role": "buffer", "meta": [{"dtype": "float32", "shape": [3]}]},
      {"name": "bn", "op": "call_function", "target": "aten::_native_batch_norm_legit",
       "args": [{"node": "x"}, {"none": true}, {"none": true}, {"node": "mean"}, {"node": "var"}, {"b": true},
                {"f": 0.1}, {"f": 1e-05}],
       "meta": [{"dtype": "float32", "shape": [2, 3]}, {"dtype": "float32", "shape": [3]},
                {"dtype": "float32", "shape": [3]}]},
      {"name": "y", "op": "call_function", "target": "getitem", "args": [{"node": "bn"}, {"i": 0}],
       "meta": [{"dtype": "float32", "shape": [2, 3]}]},
      {"name": "output", "op": "output", "args": [{"list": {"items": [{"node": "y"}]}}]}],
      "output_names": ["y"]})",
                               "bn.json");
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(PrintModule(*imported->module), R"(module @forward {
  graph @forward {
    input %x: f32[2,3]
    input %mean: f32[3] {role = buffer}
    input %var: f32[3] {role = buffer}
    %bn.0, %bn.1, %bn.2, %bn.running_mean_out, %bn.running_var_out = aten::_native_batch_norm_legit_functional(%x, none, none, %mean, %var, true, 0.1, 1e-05) : f32[2,3], f32[3], f32[3], f32[3], f32[3]
    output y = %bn.0
    output mean.updated = %bn.running_mean_out
    output var.updated = %bn.running_var_out
  }
}
)");
}
#endif  // TORCH_VERSION_MAJOR >= 2

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

// A tensor's recorded device becomes its type's (a graph Dynamo traced on the GPU is typed
// for it, so partitions compile for it); no device recorded is the CPU; a device LibTorch
// does not name is an error naming it.
TEST(FxImportErrorsTest, RecordedDevicesTypeTheValues) {
  auto on_gpu = ImportFxJson(R"({"format": "magi-fx", "version": 1, "nodes": [
      {"name": "x", "op": "placeholder", "meta": [{"dtype": "float32", "shape": [2], "device": "cuda:0"}]},
      {"name": "c", "op": "placeholder", "meta": [{"dtype": "float32", "shape": [2]}]},
      {"name": "y", "op": "call_function", "target": "aten::relu", "args": [{"node": "x"}],
       "meta": [{"dtype": "float32", "shape": [2], "device": "cuda:0"}]},
      {"name": "output", "op": "output", "args": [{"list": {"items": [{"node": "y"}, {"node": "c"}]}}]}]})",
                             "gpu.json");
  ASSERT_TRUE(on_gpu.ok()) << on_gpu.status();
  const Graph& graph = on_gpu->graph();
  EXPECT_EQ(graph.inputs()[0]->type().tensor().device, (Device{DeviceType::kCuda, 0}));
  EXPECT_EQ(graph.inputs()[1]->type().tensor().device, (Device{DeviceType::kCpu, -1}));
  EXPECT_EQ(graph.outputs()[0].value->type().tensor().device, (Device{DeviceType::kCuda, 0}));
  auto bad_device = ImportFxJson(R"({"format": "magi-fx", "version": 1, "nodes": [
      {"name": "x", "op": "placeholder", "meta": [{"dtype": "float32", "shape": [2], "device": "tpu:3"}]}]})",
                                 "tpu.json");
  ASSERT_FALSE(bad_device.ok());
  EXPECT_NE(bad_device.status().message().find("unsupported device 'tpu:3'"), std::string::npos) << bad_device.status();
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

// y = x.clone(); y[0].add_(1); return y: the write through the view reaches y (it was
// lost before: only the view was rebound), and a later read of another view of y sees it.
TEST(FxImportAliasTest, WriteThroughAViewReachesTheBaseAndItsOtherViews) {
  auto imported = ImportFxJson(R"({"format": "magi-fx", "version": 1, "graph_name": "forward", "nodes": [
      {"name": "x", "op": "placeholder", "meta": [{"dtype": "float32", "shape": [2, 3]}]},
      {"name": "y", "op": "call_function", "target": "aten::clone", "args": [{"node": "x"}],
       "meta": [{"dtype": "float32", "shape": [2, 3]}]},
      {"name": "col", "op": "call_function", "target": "aten::select.int", "args": [{"node": "y"}, {"i": 1}, {"i": 0}],
       "meta": [{"dtype": "float32", "shape": [2], "stride": [3]}]},
      {"name": "row", "op": "call_function", "target": "aten::select.int", "args": [{"node": "y"}, {"i": 0}, {"i": 0}],
       "meta": [{"dtype": "float32", "shape": [3]}]},
      {"name": "add_", "op": "call_function", "target": "aten::add_.Tensor", "args": [{"node": "row"}, {"f": 1.0}],
       "meta": [{"dtype": "float32", "shape": [3]}]},
      {"name": "output", "op": "output", "args": [{"list": {"items": [{"node": "y"}, {"node": "col"}]}}]}],
      "output_names": ["y", "col"]})",
                               "view_write.json");
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(PrintModule(*imported->module), R"(module @forward {
  graph @forward {
    input %x: f32[2,3]
    %y = aten::clone(%x, memory_format = none) : f32[2,3]
    %col = aten::select.int(%y, 1, 0) : f32[2]strides[3]
    %row = aten::select.int(%y, 0, 0) : f32[3]
    %add_ = aten::add.Scalar(%row, 1.0, 1) : f32[3]
    %y.0 = aten::select_scatter(%y, %add_, 0, 0) : f32[2,3]
    %col.1 = aten::select.int(%y.0, 1, 0) : f32[2]strides[3]
    output y = %y.0
    output col = %col.1
  }
}
)");
  // Run it: y[0] is x[0] + 1, and so is col[0].
  at::Tensor x = at::arange(6, at::kFloat).reshape({2, 3});
  auto executable = CompileForTorch("interpreter", *imported->module, imported->graph_name);
  ASSERT_TRUE(executable.ok()) << executable.status();
  auto outputs = (*executable)->Run({x});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  at::Tensor expected = x.clone();
  expected[0].add_(1);
  EXPECT_TRUE(at::equal((*outputs)[0], expected));
  EXPECT_TRUE(at::equal((*outputs)[1], expected.select(1, 0)));
}

// A buffer written through a slice comes back as "<buffer>.updated".
TEST(FxImportAliasTest, BufferWrittenThroughASliceIsUpdated) {
  auto imported = ImportFxJson(R"({"format": "magi-fx", "version": 1, "graph_name": "forward", "nodes": [
      {"name": "count", "op": "placeholder", "role": "buffer", "meta": [{"dtype": "float32", "shape": [4]}]},
      {"name": "head", "op": "call_function", "target": "aten::slice.Tensor",
       "args": [{"node": "count"}, {"i": 0}, {"i": 0}, {"i": 2}], "meta": [{"dtype": "float32", "shape": [2]}]},
      {"name": "add_", "op": "call_function", "target": "aten::add_.Tensor", "args": [{"node": "head"}, {"i": 1}],
       "meta": [{"dtype": "float32", "shape": [2]}]},
      {"name": "double", "op": "call_function", "target": "aten::mul.Tensor", "args": [{"node": "count"}, {"node": "count"}],
       "meta": [{"dtype": "float32", "shape": [4]}]},
      {"name": "output", "op": "output", "args": [{"list": {"items": [{"node": "double"}]}}]}],
      "output_names": ["y"]})",
                               "slice_write.json");
  ASSERT_TRUE(imported.ok()) << imported.status();
  std::string text = PrintModule(*imported->module);
  EXPECT_NE(text.find("%count.0 = aten::slice_scatter(%count, %add_, 0, 0, 2, 1) : f32[4]"), std::string::npos) << text;
  EXPECT_NE(text.find("%double = aten::mul.Tensor(%count.0, %count.0) : f32[4]"), std::string::npos) << text;
  EXPECT_NE(text.find("output count.updated = %count.0"), std::string::npos) << text;
}

TEST(FxImportAliasTest, WritesThatCannotBeMadeFunctionalAreErrorsNamingTheNode) {
  // Through an expanded view: several elements are one memory location.
  auto expanded = ImportFxJson(R"({"format": "magi-fx", "version": 1, "nodes": [
      {"name": "x", "op": "placeholder", "meta": [{"dtype": "float32", "shape": [3]}]},
      {"name": "wide", "op": "call_function", "target": "aten::expand", "args": [{"node": "x"}, {"list": {"items": [{"i": 2}, {"i": 3}]}}],
       "meta": [{"dtype": "float32", "shape": [2, 3], "stride": [0, 1]}]},
      {"name": "add_", "op": "call_function", "target": "aten::add_.Tensor", "args": [{"node": "wide"}, {"i": 1}],
       "meta": [{"dtype": "float32", "shape": [2, 3], "stride": [0, 1]}]},
      {"name": "output", "op": "output", "args": [{"list": {"items": [{"node": "x"}]}}]}]})",
                               "expand.json");
  EXPECT_EQ(expanded.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(expanded.status().message(),
            "expand.json: node 'add_' (call_function aten::add_.Tensor): it writes through a view made by "
            "aten::expand (wide): several of its elements are one memory location");
  // The exporter saw 'other' share x's memory (storage 1), but no schema says it is a view:
  // the write to x would not reach it, so the importer refuses instead of guessing.
  auto hidden = ImportFxJson(R"({"format": "magi-fx", "version": 1, "nodes": [
      {"name": "x", "op": "placeholder", "meta": [{"dtype": "float32", "shape": [3], "storage": 1}]},
      {"name": "other", "op": "call_function", "target": "aten::relu", "args": [{"node": "x"}],
       "meta": [{"dtype": "float32", "shape": [3], "storage": 1}]},
      {"name": "add_", "op": "call_function", "target": "aten::add_.Tensor", "args": [{"node": "x"}, {"i": 1}],
       "meta": [{"dtype": "float32", "shape": [3], "storage": 1}]},
      {"name": "output", "op": "output", "args": [{"list": {"items": [{"node": "other"}]}}]}]})",
                             "hidden.json");
  EXPECT_EQ(hidden.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(hidden.status().message().find("node 'add_' (call_function aten::add_.Tensor): it writes to 'x', whose "
                                           "memory node 'other' (read later) also uses"),
            std::string::npos)
      << hidden.status();
  // An output autograd did not make is an error naming it, never a silently shorter result.
  auto none = ImportFxJson(R"({"format": "magi-fx", "version": 1, "nodes": [
      {"name": "x", "op": "placeholder", "meta": [{"dtype": "float32", "shape": [3]}]},
      {"name": "output", "op": "output", "args": [{"list": {"items": [{"node": "x"}, {"none": true}]}}]}],
      "output_names": ["loss", "w.grad"]})",
                           "none.json");
  EXPECT_EQ(none.status().message(), "none.json: node 'output' (output): output 'w.grad' is None");
}

TEST(FxImportAliasTest, ComplexTensorsImport) {
  auto imported = ImportFxJson(R"({"format": "magi-fx", "version": 1, "graph_name": "forward", "nodes": [
      {"name": "x", "op": "placeholder", "meta": [{"dtype": "float32", "shape": [4]}]},
      {"name": "f", "op": "call_function", "target": "aten::_fft_r2c", "args": [{"node": "x"}, {"list": {"items": [{"i": 0}]}}, {"i": 0}, {"b": true}],
       "meta": [{"dtype": "complex64", "shape": [3]}]},
      {"name": "r", "op": "call_function", "target": "aten::view_as_real", "args": [{"node": "f"}],
       "meta": [{"dtype": "float32", "shape": [3, 2]}]},
      {"name": "output", "op": "output", "args": [{"list": {"items": [{"node": "f"}, {"node": "r"}]}}]}],
      "output_names": ["f", "r"]})",
                               "complex.json");
  ASSERT_TRUE(imported.ok()) << imported.status();
  at::Tensor x = at::arange(4, at::kFloat);
  auto executable = CompileForTorch("interpreter", *imported->module, imported->graph_name);
  ASSERT_TRUE(executable.ok()) << executable.status();
  auto outputs = (*executable)->Run({x});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_TRUE(at::allclose((*outputs)[0], at::fft_rfft(x)));
}

// complex32 (chalf) imports and runs (the complex_half model above: forward and joint,
// bitwise); an op whose CPU kernel lacks complex32 (sum, in LibTorch 1.13 and 2.x) fails
// when run, naming the node and LibTorch's reason, as eager PyTorch does.
TEST(FxImportAliasTest, ComplexHalfOpsWithoutAKernelFailNamingTheNode) {
  auto imported = ImportFxJson(R"({"format": "magi-fx", "version": 1, "graph_name": "forward", "nodes": [
      {"name": "x", "op": "placeholder", "meta": [{"dtype": "complex32", "shape": [3]}]},
      {"name": "s", "op": "call_function", "target": "aten::sum", "args": [{"node": "x"}],
       "meta": [{"dtype": "complex32", "shape": []}]},
      {"name": "output", "op": "output", "args": [{"list": {"items": [{"node": "s"}]}}]}],
      "output_names": ["s"]})",
                               "chalf.json");
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->module->FindGraph("forward")->inputs()[0]->type().ToString(), "c32[3]");
  auto executable = CompileForTorch("interpreter", *imported->module, imported->graph_name);
  ASSERT_TRUE(executable.ok()) << executable.status();
  auto outputs = (*executable)->Run({at::zeros({3}, at::kComplexHalf)});
  ASSERT_FALSE(outputs.ok());
  EXPECT_EQ(outputs.status().message().substr(0, 38), "graph @forward: aten::sum defining %s:") << outputs.status();
  EXPECT_NE(outputs.status().message().find("\"sum_cpu\" not implemented for 'ComplexHalf'"), std::string::npos)
      << outputs.status();
}

// The runner compares every value PyTorch recorded; one the graph does not return fails it.
TEST(FxImportAliasTest, ComparingFewerOutputsThanRecordedIsAnError) {
  auto imported = ImportFxJson(R"({"format": "magi-fx", "version": 1, "graph_name": "forward", "nodes": [
      {"name": "x", "op": "placeholder", "meta": [{"dtype": "float32", "shape": [3]}]},
      {"name": "output", "op": "output", "args": [{"list": {"items": [{"node": "x"}]}}]}],
      "output_names": ["y"]})",
                               "fewer.json");
  ASSERT_TRUE(imported.ok()) << imported.status();
  imported->tensors["x"] = at::ones({3});
  imported->tensors["expected:y"] = at::ones({3});
  ASSERT_TRUE(RunAndCompare(*imported).ok());
  imported->tensors["expected:count.updated"] = at::ones({3});
  EXPECT_EQ(RunAndCompare(*imported).status().message(),
            "PyTorch recorded 'count.updated', which the graph does not return");
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
  ExpectSameAsPyTorch(*imported, "funcol_2x", 1e-5, *communicator);
}

}  // namespace
}  // namespace magi
