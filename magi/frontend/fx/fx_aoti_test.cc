// One aten-level graph two ways (PyTorch 2.11+ legs only): the MLP of
// magi/compat/testdata/aoti_models.py exported by tools/fx_export.py and run by Magi's
// interpreter, and the same graph compiled for the CPU by AOTInductor and run from C++ by
// compat::AotiPackage, with the input types the imported IR graph declares. Both are
// compared with each other and with PyTorch's eager result: the check the Inductor
// backend's partitions will get against the interpreter.
#include <torch/torch.h>

#include <fstream>
#include <iostream>
#include <iterator>

#include "gtest/gtest.h"
#include "magi/backend/torch_executable.h"
#include "magi/base/gtest_printers.h"
#include "magi/compat/aoti_package.h"
#include "magi/frontend/fx/fx_importer.h"

namespace magi {
namespace {

// The input names make_aoti_mlp.py compiled the package's inputs in (tools/fx_export.py's names).
std::vector<std::string> PackageInputNames() {
  std::ifstream in("magi/compat/aoti_mlp/mlp_io.pt", std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  c10::IValue saved = torch::pickle_load(bytes);  // owns the list iterated below
  c10::IValue list = saved.toGenericDict().at("names");
  std::vector<std::string> names;
  for (const c10::IValue& name : list.toListRef()) names.push_back(name.toStringRef());
  return names;
}

TEST(FxAotiTest, InterpreterAndAotInductorAgreeOnTheSameGraph) {
  absl::StatusOr<FxImport> imported = ImportFxFile("magi/frontend/fx/aoti_mlp/mlp.fx.json");
  ASSERT_TRUE(imported.ok()) << imported.status();
  const Graph& graph = imported->graph();

  // The interpreter, on the exported inputs in the graph's order.
  std::vector<at::Tensor> graph_inputs;
  for (const Value* input : graph.inputs()) graph_inputs.push_back(imported->tensors.at(input->name()));
  absl::StatusOr<std::unique_ptr<TorchExecutable>> executable =
      CompileForTorch("interpreter", *imported->module, imported->graph_name);
  ASSERT_TRUE(executable.ok()) << executable.status();
  absl::StatusOr<std::vector<at::Tensor>> interpreted = (*executable)->Run(graph_inputs);
  ASSERT_TRUE(interpreted.ok()) << interpreted.status();
  ASSERT_EQ(interpreted->size(), 1u);

  // The package, on the same tensors in the package's order, checked against the IR's types.
  compat::AotiOptions options;
  std::vector<at::Tensor> package_inputs;
  for (const std::string& name : PackageInputNames()) {
    const Value* value = graph.FindValue(name);
    ASSERT_NE(value, nullptr) << "the FX graph has no input %" << name;
    options.input_types.push_back(value->type().tensor());
    package_inputs.push_back(imported->tensors.at(name));
  }
  ASSERT_EQ(package_inputs.size(), graph_inputs.size());
  absl::StatusOr<std::unique_ptr<compat::AotiPackage>> package =
      compat::AotiPackage::Load("magi/compat/aoti_mlp/mlp.pt2", options);
  ASSERT_TRUE(package.ok()) << package.status();
  absl::StatusOr<std::vector<at::Tensor>> compiled = (*package)->Run(package_inputs);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  ASSERT_EQ(compiled->size(), 1u);

  const at::Tensor& eager = imported->tensors.at("expected:" + graph.outputs()[0].name);
  const at::Tensor& a = (*interpreted)[0];
  const at::Tensor& b = (*compiled)[0];
  ASSERT_EQ(a.sizes(), eager.sizes());
  ASSERT_EQ(b.sizes(), eager.sizes());
  double interpreter_vs_eager = (a - eager).abs().max().item<double>();
  double aoti_vs_interpreter = (b - a).abs().max().item<double>();
  double aoti_vs_eager = (b - eager).abs().max().item<double>();
  std::cout << "MLP (" << graph.num_nodes() << " IR nodes, torch " << imported->torch_version
            << "): interpreter vs eager " << interpreter_vs_eager << ", AOTInductor vs interpreter "
            << aoti_vs_interpreter << ", AOTInductor vs eager " << aoti_vs_eager << std::endl;
  EXPECT_EQ(interpreter_vs_eager, 0.0);  // same ATen kernels as eager
  EXPECT_LE(aoti_vs_interpreter, 1e-5);  // Inductor's own fused, vectorized kernels
  EXPECT_LE(aoti_vs_eager, 1e-5);
}

}  // namespace
}  // namespace magi
