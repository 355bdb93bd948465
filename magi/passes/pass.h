// The interface of a Magi IR pass, and GraphPass, the base of passes that transform
// each graph on its own.
//
// A pass transforms a module in place and says whether it changed anything. Run()
// is the public, non-virtual entry point (later the place for timing, dumps and
// verification); subclasses implement RunImpl(), or GraphPass::RunOnGraph(). name() is
// the kebab-case name the registry, textual pipelines and dumps use ("dce",
// "bucket-collectives"); a pass spells it once, as `static constexpr absl::string_view
// kName`, which MAGI_REGISTER_PASS (pass_registration.h) registers it under.
// A pass reports failure as a Status; it never throws and never aborts on bad input.
//
// A pass with options takes them typed (`explicit BucketCollectives(BucketCollectivesOptions)`,
// pass_options.h) and prints them back with PrintOptions(), so a pipeline built in code
// prints as text for reports and dumps (PassManager::Print, pipeline.h).
#ifndef MAGI_PASSES_PASS_H_
#define MAGI_PASSES_PASS_H_

#include <string>

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

  // The pass's options as a textual pipeline writes them, "key=value,..." in key order
  // (the options' Print(), pass_options.h); "" for a pass without options.
  virtual std::string PrintOptions() const { return ""; }
  // The pass as a textual pipeline writes it: "name" or "name{options}".
  virtual std::string Print() const;

 protected:
  virtual absl::StatusOr<bool> RunImpl(Module& module) = 0;
};

// A pass that transforms each graph of a module on its own: RunOnGraph is called for
// every graph, in the module's order; the module changed if any graph did. The first
// error stops the run (graphs before it stay transformed, as with any failing pass).
// A pass that looks at several graphs at once derives from Pass instead.
class GraphPass : public Pass {
 protected:
  // Transforms `graph` (its module is graph.module()); true if it changed.
  virtual absl::StatusOr<bool> RunOnGraph(Graph& graph) = 0;

  absl::StatusOr<bool> RunImpl(Module& module) final;
};

}  // namespace magi

#endif  // MAGI_PASSES_PASS_H_
