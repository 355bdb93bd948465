// Registers "auto-recompute" with the pass registry. The pass itself
// (magi/passes/auto_recompute.h) only knows the NodeCostOracle interface; building its cost
// model from a profile name needs magi/cost, so the factory lives here, in magi/search, the
// lowest layer that may depend on both passes and cost: no target of //magi/passes depends on
// the cost model (tools/check_layering.sh checks it).
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "magi/cost/cost_model.h"
#include "magi/cost/device_profile.h"
#include "magi/passes/pass_registration.h"
#include "magi/registry/registry.h"
#include "magi/search/auto_recompute_registration.h"

namespace magi {

absl::StatusOr<std::unique_ptr<AutoRecompute>> MakeAutoRecompute(const ComponentOptions& options, CostModel model) {
  absl::StatusOr<AutoRecomputeOptions> parsed = ParsePassOptions<AutoRecompute>(options);
  if (!parsed.ok()) return parsed.status();
  if (parsed->profile.empty()) {
    parsed->profile = model.profile().name;
  } else if (parsed->profile != model.profile().name) {
    return absl::InvalidArgumentError(absl::StrCat("auto-recompute names profile '", parsed->profile,
                                                   "', but the cost model in use is '", model.profile().name, "'"));
  }
  return std::make_unique<AutoRecompute>(*std::move(parsed), std::move(model));
}

PassManager::PassFactory AutoRecomputeWithCostModel(CostModel model) {
  return [model = std::move(model)](const PassSpec& spec) -> absl::StatusOr<std::unique_ptr<Pass>> {
    if (spec.name != AutoRecompute::kName) return std::unique_ptr<Pass>();  // the registry's
    absl::StatusOr<std::unique_ptr<AutoRecompute>> pass = MakeAutoRecompute(spec.options, model);
    if (!pass.ok()) return pass.status();
    return std::unique_ptr<Pass>(*std::move(pass));
  };
}

namespace {

MAGI_REGISTER(Pass, std::string(AutoRecompute::kName),
              [](const ComponentOptions& options) -> absl::StatusOr<std::unique_ptr<Pass>> {
                absl::StatusOr<AutoRecomputeOptions> parsed = ParsePassOptions<AutoRecompute>(options);
                if (!parsed.ok()) return parsed.status();
                if (parsed->profile.empty()) parsed->profile = "cpu";
                absl::StatusOr<DeviceProfile> profile = LoadDeviceProfile(parsed->profile);
                if (!profile.ok()) return profile.status();
                return std::unique_ptr<Pass>(
                    std::make_unique<AutoRecompute>(*std::move(parsed), CostModel(*std::move(profile))));
              });

}  // namespace
}  // namespace magi
