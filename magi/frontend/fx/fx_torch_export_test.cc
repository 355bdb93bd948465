// The torch.export path of tools/fx_export.py, run at build time by the PyTorch the build
// is configured with (only on PyTorch 2.x: CI's MAGI_TORCH=2.12 and 2.11 legs):
// torch.export.export(...).run_decompositions() graphs imported, run by the interpreter
// and compared with the eager outputs PyTorch recorded when exporting.
// TODO(fx-fidelity): use fx_check's RunAndCompare once that lands; this is its minimal twin.
#include <ATen/ATen.h>
#include <torch/csrc/api/include/torch/version.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "magi/backend/torch_executable.h"
#include "magi/base/gtest_printers.h"
#include "magi/frontend/fx/fx_importer.h"

namespace magi {
namespace {

class FxTorchExportTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FxTorchExportTest, RunsLikePyTorch) {
  const std::string path = "magi/frontend/fx/torch_export/" + GetParam() + ".fx.json";
  std::ifstream file(path);
  std::stringstream json;
  json << file.rdbuf();
  EXPECT_NE(json.str().find("\"tracer\": \"torch.export\""), std::string::npos) << path << " was not made by torch.export";
  absl::StatusOr<FxImport> imported = ImportFxFile(path);
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->kind, "forward");
  // Exported by the configured PyTorch, not by another one on the machine.
  EXPECT_EQ(imported->torch_version.rfind(std::to_string(TORCH_VERSION_MAJOR) + "." +
                                              std::to_string(TORCH_VERSION_MINOR) + ".",
                                          0),
            0u)
      << imported->torch_version;
  const Graph& graph = imported->graph();
  std::vector<at::Tensor> inputs;
  for (const Value* input : graph.inputs()) inputs.push_back(imported->tensors.at(input->name()));
  absl::StatusOr<std::unique_ptr<TorchExecutable>> executable =
      CompileForTorch("interpreter", *imported->module, imported->graph_name);
  ASSERT_TRUE(executable.ok()) << executable.status();
  absl::StatusOr<std::vector<at::Tensor>> outputs = (*executable)->Run(inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  ASSERT_EQ(outputs->size(), graph.outputs().size());
  // Every value PyTorch recorded is compared: none may be left unchecked.
  size_t recorded = 0;
  for (const auto& [name, tensor] : imported->tensors) recorded += absl::StartsWith(name, "expected:") ? 1 : 0;
  EXPECT_EQ(recorded, graph.outputs().size()) << "PyTorch recorded values the graph does not return";
  double worst = 0;
  for (size_t i = 0; i < outputs->size(); ++i) {
    const std::string& name = graph.outputs()[i].name;
    auto expected = imported->tensors.find("expected:" + name);
    ASSERT_NE(expected, imported->tensors.end()) << "PyTorch recorded no output '" << name << "'";
    ASSERT_EQ((*outputs)[i].sizes(), expected->second.sizes()) << name;
    double scale = std::max(1.0, expected->second.abs().max().item<double>());
    double diff =
        ((*outputs)[i].to(at::kDouble) - expected->second.to(at::kDouble)).abs().max().item<double>() / scale;
    worst = std::max(worst, diff);
    EXPECT_LE(diff, 2e-5) << GetParam() << ": output '" << name << "' differs by " << diff;
  }
  std::cout << GetParam() << " (torch.export, torch " << imported->torch_version << "): " << graph.num_nodes()
            << " nodes, " << outputs->size() << " outputs within " << worst << " of PyTorch" << std::endl;
}

INSTANTIATE_TEST_SUITE_P(Models, FxTorchExportTest, ::testing::Values("llama", "vit", "resnet18",
                                                                   // buffers written in forward (.updated outputs)
                                                                   "instance_norm_stats", "buffer_slice_write"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace magi
