// Building AutoRecompute from textual options with a given CostModel (the registered
// "auto-recompute" builds its model from `profile=NAME`; the compile driver passes its
// own, so a calibration table or a file profile is not lost). Depends on magi/cost, which
// the pass itself (magi/passes/auto_recompute.h) does not, so it lives in magi/search, the
// lowest layer above both passes and cost.
#ifndef MAGI_SEARCH_AUTO_RECOMPUTE_REGISTRATION_H_
#define MAGI_SEARCH_AUTO_RECOMPUTE_REGISTRATION_H_

#include <memory>

#include "absl/status/statusor.h"
#include "magi/cost/cost_model.h"
#include "magi/passes/auto_recompute.h"
#include "magi/passes/pipeline.h"
#include "magi/registry/registry.h"

namespace magi {

// An AutoRecompute from `options` (budget_mb=N or budget_gb=X, positive and finite;
// profile=NAME is accepted and must name `model`'s profile) that ranks with `model`; its
// Options name `model`'s profile, so it prints as "auto-recompute{budget_mb=...,profile=P}".
absl::StatusOr<std::unique_ptr<AutoRecompute>> MakeAutoRecompute(const ComponentOptions& options, CostModel model);

// A PassManager::PassFactory that builds every auto-recompute of a pipeline with a copy of
// `model` and leaves every other pass to the registry: how the compile driver, and `magi opt
// --device=... --calibration=...`, run a pipeline the search reported with the cost model the
// search used. `model`'s calibration table (not owned) must outlive the passes built.
PassManager::PassFactory AutoRecomputeWithCostModel(CostModel model);

}  // namespace magi

#endif  // MAGI_SEARCH_AUTO_RECOMPUTE_REGISTRATION_H_
