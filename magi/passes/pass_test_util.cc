#include "magi/passes/pass_test_util.h"

#include "gtest/gtest.h"
#include "magi/base/file.h"
#include "magi/ir/parser.h"
#include "magi/ir/printer.h"
#include "magi/ir/verifier.h"
#include "magi/passes/pass.h"
#include "magi/passes/pipeline.h"
#include "magi/registry/registry.h"

namespace magi::testing {

std::string RunPassOnText(absl::string_view pass_name, absl::string_view input, bool expect_changed) {
  auto module = ParseModule(input);
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return "";
  auto pass = Registry<Pass>::Global().Create(pass_name);
  EXPECT_TRUE(pass.ok()) << pass.status();
  if (!pass.ok()) return "";
  absl::StatusOr<bool> changed = (*pass)->Run(**module);
  EXPECT_TRUE(changed.ok()) << changed.status();
  if (changed.ok()) {
    EXPECT_EQ(*changed, expect_changed);
  }
  absl::Status verified = VerifyModule(**module);
  EXPECT_TRUE(verified.ok()) << verified;
  return PrintModule(**module);
}

std::unique_ptr<Module> LoadTestdata(absl::string_view file_name) {
  std::string path = std::string("magi/passes/testdata/") + std::string(file_name);
  absl::StatusOr<std::string> text = ReadFile(path);
  EXPECT_TRUE(text.ok()) << text.status();
  if (!text.ok()) return nullptr;
  auto module = ParseModule(*text, path);
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return nullptr;
  return *std::move(module);
}

void RunPipeline(Module& module, absl::string_view spec) {
  absl::StatusOr<bool> changed = RunPassPipeline(spec, module);
  ASSERT_TRUE(changed.ok()) << changed.status();
}

int CountOps(const Graph& graph, absl::string_view op) {
  int count = 0;
  for (const Node* node : graph.nodes()) count += node->op() == op;
  return count;
}

}  // namespace magi::testing
