// Test helper for passes: parse text IR, run one registered pass, verify, print.
#ifndef MAGI_PASSES_PASS_TEST_UTIL_H_
#define MAGI_PASSES_PASS_TEST_UTIL_H_

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "magi/ir/module.h"

namespace magi::testing {

// Parses `input`, runs the registered pass `pass_name` on it, checks that it reports
// `expect_changed` and that the result verifies, and returns the printed module.
// Failures are gtest failures.
std::string RunPassOnText(absl::string_view pass_name, absl::string_view input, bool expect_changed);

// Parses a .mir file of magi/passes/testdata (a test `data` dependency); null after a
// gtest failure if it is missing or malformed.
std::unique_ptr<Module> LoadTestdata(absl::string_view file_name);

// Runs the textual pipeline `spec` with the verifier after every pass; gtest failure on error.
void RunPipeline(Module& module, absl::string_view spec);

// Counts the nodes of `graph` with op `op`.
int CountOps(const Graph& graph, absl::string_view op);

}  // namespace magi::testing

#endif  // MAGI_PASSES_PASS_TEST_UTIL_H_
