// Parses Magi's text IR (the format PrintModule writes; see printer.h).
//
//   absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(text, "step.mir");
//
// Errors are InvalidArgument statuses that start with "<file>:<line>:<column>: " and
// say what was expected and what was found. The parser resolves names (a value must
// be defined before it is used, names are unique) and records each node's source
// location; it does not check op semantics: run VerifyModule for that.
// Malformed input of any kind gives an error, never a crash or a hang.
#ifndef MAGI_IR_PARSER_H_
#define MAGI_IR_PARSER_H_

#include <memory>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "magi/ir/module.h"

namespace magi {

// `filename` only prefixes error messages (empty: "<text>").
absl::StatusOr<std::unique_ptr<Module>> ParseModule(absl::string_view text, absl::string_view filename = "");

}  // namespace magi

#endif  // MAGI_IR_PARSER_H_
