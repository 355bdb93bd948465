// Registers "auto-recompute" with the pass registry. The pass itself (auto_recompute.h)
// only knows the NodeCostOracle interface; building its cost model from a profile name
// needs magi/cost, so the factory lives in this target of its own: the one target of
// //magi/passes that depends on the cost model (tools/check_layering.sh checks it).
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "magi/cost/cost_model.h"
#include "magi/cost/device_profile.h"
#include "magi/passes/auto_recompute.h"
#include "magi/registry/registry.h"

namespace magi {
namespace {

MAGI_REGISTER(Pass, "auto-recompute", [](const ComponentOptions& options) -> absl::StatusOr<std::unique_ptr<Pass>> {
  double budget_bytes = -1;
  std::string profile_name = "cpu";
  for (const auto& [key, value] : options) {
    double number = 0;
    if ((key == "budget_mb" || key == "budget_gb") && absl::SimpleAtod(value, &number) && number > 0) {
      budget_bytes = number * (key == "budget_mb" ? 1e6 : 1e9);
    } else if (key == "profile") {
      profile_name = value;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "auto-recompute takes budget_mb=N or budget_gb=X (positive) and profile=NAME, not ", key, "=", value));
    }
  }
  if (budget_bytes < 0) return absl::InvalidArgumentError("auto-recompute needs budget_mb=N or budget_gb=X");
  absl::StatusOr<DeviceProfile> profile = LoadDeviceProfile(profile_name);
  if (!profile.ok()) return profile.status();
  return std::make_unique<AutoRecompute>(static_cast<int64_t>(budget_bytes), CostModel(*std::move(profile)));
});

}  // namespace
}  // namespace magi
