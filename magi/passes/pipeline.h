// Pass pipelines: built in code or parsed from text, run with the verifier in between.
//
// Code builds a pipeline from pass objects with typed options (what the strategy search
// does); text is for `magi opt`, flags, reports and dumps:
//
//   PassManager manager;
//   BucketCollectivesOptions buckets;
//   buckets.max_mb = 2;
//   manager.AddPass<BucketCollectives>(buckets);
//   manager.AddPass<DeadCodeElimination>();
//   manager.Print();                                         // "bucket-collectives{max_mb=2},dce"
//
//   absl::StatusOr<PassPipeline> p = ParsePassPipeline("dce,cse,dce");
//   MAGI_RETURN_IF_ERROR(manager.AddPipeline(*p));           // looks names up in the registry
//   absl::StatusOr<bool> changed = manager.Run(module);      // verifies after every pass
//   manager.statistics();                                    // per pass: runs, changed, seconds
//
// Text form (MLIR-style): passes separated by commas, options in braces,
// `name{key=value,key=value}`; `fixed-point{max_iterations=N}(a,b)` repeats the inner
// pipeline until it changes nothing (at most N times). Print(Parse(text)) == text for
// canonical text (no spaces, keys in order), and a manager built from that text prints
// it back (options at their defaults left out, except those a pass always prints).
#ifndef MAGI_PASSES_PIPELINE_H_
#define MAGI_PASSES_PIPELINE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/passes/pass.h"
#include "magi/passes/pass_options.h"
#include "magi/registry/registry.h"

namespace magi {

// One entry of a textual pipeline.
struct PassSpec {
  std::string name;
  ComponentOptions options;
  std::vector<PassSpec> nested;  // for fixed-point
};
using PassPipeline = std::vector<PassSpec>;

// Parses the text form; InvalidArgument with the column and what was expected.
absl::StatusOr<PassPipeline> ParsePassPipeline(absl::string_view text);
std::string PrintPassPipeline(const PassPipeline& pipeline);

struct PassStatistics {
  std::string name;
  int runs = 0;
  int changed = 0;
  double seconds = 0;
};

class PassManager {
 public:
  // `verify_each`: run VerifyModule after every pass (tests and tools do; it is cheap).
  explicit PassManager(bool verify_each = true) : verify_each_(verify_each) {}

  // `pass` must not be null.
  void AddPass(std::unique_ptr<Pass> pass) { passes_.push_back(std::move(pass)); }
  template <typename T, typename... Args>
  void AddPass(Args&&... args) {
    AddPass(std::make_unique<T>(std::forward<Args>(args)...));
  }
  // Builds a pass for `spec` instead of the registry, or returns null to leave it to
  // the registry. Compilers use it to bind passes to their own objects (the compile
  // driver's auto-recompute uses its CostModel, calibration table included).
  using PassFactory = std::function<absl::StatusOr<std::unique_ptr<Pass>>(const PassSpec& spec)>;

  // Creates the passes of `pipeline` from `factory` (when given and it builds one) or the
  // registry (NotFound lists the registered names); nested pipelines use the same.
  absl::Status AddPipeline(const PassPipeline& pipeline, const PassFactory& factory = nullptr);

  // Runs every pass in order; the first failure (a pass's, or the verifier's naming the
  // pass that broke the module) stops the run. True if any pass changed the module.
  absl::StatusOr<bool> Run(Module& module);
  const std::vector<PassStatistics>& statistics() const { return statistics_; }

  // The passes as a textual pipeline: "reshard-after-forward{mode=reshard},dce" (each
  // pass's Print(); "" when empty). For reports and dumps.
  std::string Print() const;

  // Called after every pass (after verification) with the pass's position and name;
  // tools use it to dump the module between passes. An error stops the run.
  using AfterPassHook = std::function<absl::Status(int index, absl::string_view pass_name, const Module& module)>;
  void set_after_pass_hook(AfterPassHook hook) { after_pass_ = std::move(hook); }

 private:
  AfterPassHook after_pass_;
  bool verify_each_;
  std::vector<std::unique_ptr<Pass>> passes_;
  std::vector<PassStatistics> statistics_;
};

// Parses `spec`, creates its passes from the registry and runs them on `module` (the
// verifier after each pass when `verify_each`); true if anything changed.
absl::StatusOr<bool> RunPassPipeline(absl::string_view spec, Module& module, bool verify_each = true);

struct FixedPointOptions : PassOptions<FixedPointOptions> {
  int max_iterations = 10;  // runs of the inner pipeline, at most (>= 1)

  static const OptionSchema<FixedPointOptions>& Schema();
};

// Repeats an inner pipeline until it changes nothing or `max_iterations` runs happened.
// Textual pipelines spell it `fixed-point{max_iterations=N}(a,b)`; PassManager::AddPipeline
// builds it itself (it takes an inner pipeline, which registry factories cannot), so it
// is not in the registry.
class FixedPointPass : public Pass {
 public:
  using Options = FixedPointOptions;
  static constexpr absl::string_view kName = "fixed-point";

  // `inner` must not be null.
  FixedPointPass(std::unique_ptr<PassManager> inner, Options options = {})
      : inner_(std::move(inner)), options_(options) {}
  absl::string_view name() const override { return kName; }
  std::string PrintOptions() const override { return options_.Print(); }
  // "fixed-point{...}(inner passes)".
  std::string Print() const override;

 protected:
  absl::StatusOr<bool> RunImpl(Module& module) override;

 private:
  std::unique_ptr<PassManager> inner_;
  Options options_;
};

}  // namespace magi

#endif  // MAGI_PASSES_PIPELINE_H_
