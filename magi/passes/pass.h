// The interface of a Magi IR pass.
//
// A pass transforms a module in place and says whether it changed anything. Run()
// is the public, non-virtual entry point (later the place for timing, dumps and
// verification); subclasses implement RunImpl(). name() is the kebab-case name the
// registry, textual pipelines and dumps use ("dce", "bucket-collectives").
// A pass reports failure as a Status; it never throws and never aborts on bad input.
#ifndef MAGI_PASSES_PASS_H_
#define MAGI_PASSES_PASS_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "magi/ir/module.h"

namespace magi {

class Pass {
 public:
  static constexpr absl::string_view kRegistryKind = "pass";

  virtual ~Pass() = default;
  virtual absl::string_view name() const = 0;

  // Runs the pass over every graph of `module`; true if the module changed.
  absl::StatusOr<bool> Run(Module& module) { return RunImpl(module); }

 protected:
  virtual absl::StatusOr<bool> RunImpl(Module& module) = 0;
};

}  // namespace magi

#endif  // MAGI_PASSES_PASS_H_
