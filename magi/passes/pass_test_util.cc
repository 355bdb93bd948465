#include "magi/passes/pass_test_util.h"

#include "gtest/gtest.h"
#include "magi/ir/parser.h"
#include "magi/ir/printer.h"
#include "magi/ir/verifier.h"
#include "magi/passes/pass.h"
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
  if (changed.ok()) EXPECT_EQ(*changed, expect_changed);
  absl::Status verified = VerifyModule(**module);
  EXPECT_TRUE(verified.ok()) << verified;
  return PrintModule(**module);
}

}  // namespace magi::testing
