// Runs an imported FX graph with the interpreter and compares it with what PyTorch
// computed when the graph was exported (the "expected:<output>" tensors of its file).
//
//   MAGI_ASSIGN_OR_RETURN(FxImport imported, ImportFxFile(path));
//   MAGI_ASSIGN_OR_RETURN(FxCheck check, RunAndCompare(imported));
//   if (!check.failures.empty()) ...   // outputs that differ, by name
//
// Every output must have an expected value and every expected value an output: a graph
// that returns fewer results than PyTorch recorded (a dropped gradient, a buffer update
// nobody returned) is an error, never a smaller comparison. Differences are relative to
// max(1, the expected output's largest magnitude); NaN matches NaN and infinities match
// themselves; integer and bool outputs must be equal.
#ifndef MAGI_FRONTEND_FX_FX_CHECK_H_
#define MAGI_FRONTEND_FX_FX_CHECK_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/comm/communicator.h"
#include "magi/frontend/fx/fx_importer.h"

namespace magi {

struct FxCheck {
  int compared = 0;     // outputs compared
  double worst = 0;     // largest relative difference
  int nodes = 0;        // IR nodes run
  std::vector<std::string> failures;  // "output 'x.grad' differs by 0.5", one per bad output
};

struct FxCheckOptions {
  double tolerance = 2e-5;
  // Runs the graph this many times; outputs that change between runs (reads of
  // uninitialized or out-of-range memory) are failures.
  int runs = 1;
  // Bound to every process group of the module when the graph has collectives.
  std::shared_ptr<Communicator> communicator;
};

// See the file comment. Errors: no tensor for an input, an output without an expected
// value or the reverse, a graph the interpreter cannot compile or run.
absl::StatusOr<FxCheck> RunAndCompare(const FxImport& imported, const FxCheckOptions& options = {});

}  // namespace magi

#endif  // MAGI_FRONTEND_FX_FX_CHECK_H_
