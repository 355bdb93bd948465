// Registers "auto-recompute" with the pass registry. The pass itself (auto_recompute.h)
// only knows the NodeCostOracle interface; building its cost model from a profile name
// needs magi/cost, so the factory lives in this target of its own: the one target of
// //magi/passes that depends on the cost model (tools/check_layering.sh checks it).
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "magi/base/numbers.h"
#include "magi/cost/cost_model.h"
#include "magi/cost/device_profile.h"
#include "magi/passes/auto_recompute_registration.h"
#include "magi/registry/registry.h"

namespace magi {
namespace {

struct RecomputeOptions {
  int64_t budget_bytes = 0;
  std::string profile;  // "" when the options name none
};

absl::StatusOr<RecomputeOptions> ParseRecomputeOptions(const ComponentOptions& options) {
  std::optional<int64_t> budget_bytes;
  RecomputeOptions parsed;
  for (const auto& [key, value] : options) {
    double number = 0;
    if ((key == "budget_mb" || key == "budget_gb") && ParseFiniteDouble(value, &number) && number > 0) {
      budget_bytes = BytesFromDouble(number * (key == "budget_mb" ? 1e6 : 1e9));
      if (!budget_bytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("auto-recompute: ", key, "=", value, " is more bytes than int64 can hold"));
      }
    } else if (key == "profile") {
      parsed.profile = value;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("auto-recompute takes budget_mb=N or budget_gb=X (positive, finite) and profile=NAME, not ",
                       key, "=", value));
    }
  }
  if (!budget_bytes) return absl::InvalidArgumentError("auto-recompute needs budget_mb=N or budget_gb=X");
  parsed.budget_bytes = *budget_bytes;
  return parsed;
}

}  // namespace

absl::StatusOr<std::unique_ptr<AutoRecompute>> MakeAutoRecompute(const ComponentOptions& options, CostModel model) {
  absl::StatusOr<RecomputeOptions> parsed = ParseRecomputeOptions(options);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->profile.empty() && parsed->profile != model.profile().name) {
    return absl::InvalidArgumentError(absl::StrCat("auto-recompute names profile '", parsed->profile,
                                                   "', but the cost model in use is '", model.profile().name, "'"));
  }
  return std::make_unique<AutoRecompute>(parsed->budget_bytes, std::move(model));
}

PassManager::PassFactory AutoRecomputeWithCostModel(CostModel model) {
  return [model = std::move(model)](const PassSpec& spec) -> absl::StatusOr<std::unique_ptr<Pass>> {
    if (spec.name != "auto-recompute") return std::unique_ptr<Pass>();  // the registry's
    absl::StatusOr<std::unique_ptr<AutoRecompute>> pass = MakeAutoRecompute(spec.options, model);
    if (!pass.ok()) return pass.status();
    return std::unique_ptr<Pass>(*std::move(pass));
  };
}

namespace {

MAGI_REGISTER(Pass, "auto-recompute", [](const ComponentOptions& options) -> absl::StatusOr<std::unique_ptr<Pass>> {
  absl::StatusOr<RecomputeOptions> parsed = ParseRecomputeOptions(options);
  if (!parsed.ok()) return parsed.status();
  absl::StatusOr<DeviceProfile> profile = LoadDeviceProfile(parsed->profile.empty() ? "cpu" : parsed->profile);
  if (!profile.ok()) return profile.status();
  return std::unique_ptr<Pass>(std::make_unique<AutoRecompute>(parsed->budget_bytes, CostModel(*std::move(profile))));
});

}  // namespace
}  // namespace magi
