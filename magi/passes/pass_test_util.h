// Test helper for passes: parse text IR, run one registered pass, verify, print.
#ifndef MAGI_PASSES_PASS_TEST_UTIL_H_
#define MAGI_PASSES_PASS_TEST_UTIL_H_

#include <string>

#include "absl/strings/string_view.h"

namespace magi::testing {

// Parses `input`, runs the registered pass `pass_name` on it, checks that it reports
// `expect_changed` and that the result verifies, and returns the printed module.
// Failures are gtest failures.
std::string RunPassOnText(absl::string_view pass_name, absl::string_view input, bool expect_changed);

}  // namespace magi::testing

#endif  // MAGI_PASSES_PASS_TEST_UTIL_H_
