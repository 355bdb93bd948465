#include "magi/training/trainer_options_table.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace magi {

const std::vector<TrainerOptionCase>& TrainerOptionCases() {
  using Expect = TrainerOptionCase::Expect;
  static const auto* cases = new std::vector<TrainerOptionCase>{
      {"sharding", [](CompileOptions& o) { o.sharding = FsdpPlan(); }, Expect::kRefused},
      {"optimization.canonicalize", [](CompileOptions& o) { o.optimization.canonicalize = "no-such-canonical-pass"; },
       Expect::kError, nullptr, "no-such-canonical-pass"},
      {"optimization.passes", [](CompileOptions& o) { o.optimization.passes = "no-such-pipeline-pass"; },
       Expect::kError, nullptr, "no-such-pipeline-pass"},
      {"optimization.memory_budget_bytes", [](CompileOptions& o) { o.optimization.memory_budget_bytes = 1; },
       Expect::kError, nullptr, "no strategy fits 1 bytes per rank"},
      {"optimization.search",
       [](CompileOptions& o) {
         o.optimization.search.max_rounds = 3;
         o.optimization.search.prefetch = {-1, 1};
       },
       Expect::kCompiledWith,
       [](const CompileOptions& o) {
         return o.optimization.search.max_rounds == 3 && o.optimization.search.prefetch == std::vector<int>{-1, 1};
       }},
      {"optimization.weight_preparation", [](CompileOptions& o) { o.optimization.weight_preparation = true; },
       Expect::kRefused},
      {"cost_model.device_profile", [](CompileOptions& o) { o.cost_model.device_profile = "no-such-profile"; },
       Expect::kError, nullptr, "no-such-profile"},
      {"cost_model.calibration_csv", [](CompileOptions& o) { o.cost_model.calibration_csv = "/tmp/table.csv"; },
       Expect::kRefused},
      {"cost_model.calibration_cache_dir",
       [](CompileOptions& o) { o.cost_model.calibration_cache_dir = "/tmp/magi-options-test-cache"; },
       Expect::kCompiledWith,
       [](const CompileOptions& o) { return o.cost_model.calibration_cache_dir == "/tmp/magi-options-test-cache"; }},
      {"partitioning.backends", [](CompileOptions& o) { o.partitioning.backends = {"no-such-partitioner"}; },
       Expect::kError, nullptr, "no-such-partitioner"},
      {"partitioning.backend_options",
       [](CompileOptions& o) {
         o.partitioning.backend_options["inductor"] = {{"python", "/nowhere/python3"}};
       },
       Expect::kCompiledWith,
       [](const CompileOptions& o) {
         auto it = o.partitioning.backend_options.find("inductor");
         return it != o.partitioning.backend_options.end() && it->second.size() == 1;
       }},
      {"partitioning.min_nodes", [](CompileOptions& o) { o.partitioning.min_nodes = 7; }, Expect::kCompiledWith,
       [](const CompileOptions& o) { return o.partitioning.min_nodes == 7; }},
      {"partitioning.max_nodes", [](CompileOptions& o) { o.partitioning.max_nodes = 9; }, Expect::kCompiledWith,
       [](const CompileOptions& o) { return o.partitioning.max_nodes == 9; }},
      {"partitioning.align_collectives", [](CompileOptions& o) { o.partitioning.align_collectives = false; },
       Expect::kCompiledWith, [](const CompileOptions& o) { return !o.partitioning.align_collectives; }},
      {"partitioning.recompute_fusible", [](CompileOptions& o) { o.partitioning.recompute_fusible = false; },
       Expect::kCompiledWith, [](const CompileOptions& o) { return !o.partitioning.recompute_fusible; }},
      {"partitioning.log", [](CompileOptions& o) { o.partitioning.log = false; }, Expect::kCompiledWith,
       [](const CompileOptions& o) { return !o.partitioning.log; }},
      {"backend", [](CompileOptions& o) { o.backend = "no-such-backend"; }, Expect::kError, nullptr, "no-such-backend"},
      {"backend_options",
       [](CompileOptions& o) {
         o.backend_options = {{"no_such_option", "1"}};
       },
       Expect::kError, nullptr, "the interpreter takes no options"},  // the default primary backend takes none
      {"deterministic", [](CompileOptions& o) { o.deterministic = true; }, Expect::kError, nullptr,
       "call magi::EnableDeterministicMode()"},
      {"batch_invariant_sequences", [](CompileOptions& o) { o.batch_invariant_sequences = 4; }, Expect::kRefused},
      {"expected_plan_hash", [](CompileOptions& o) { o.expected_plan_hash = "0123456789abcdef"; }, Expect::kError,
       nullptr, ", not the expected 0123456789abcdef"},
  };
  return *cases;
}

std::string CheckTrainerOptionCase(const TrainerOptionCase& row, const absl::Status& created,
                                   const CompileOptions* compiled, const std::string& trainer) {
  const std::string where = absl::StrCat(trainer, ", CompileOptions::", row.field, ": ");
  switch (row.expect) {
    case TrainerOptionCase::Expect::kRefused: {
      const std::string expected = absl::StrCat(trainer, " does not take CompileOptions::", row.field, ":");
      if (created.code() != absl::StatusCode::kInvalidArgument || !absl::StrContains(created.message(), expected)) {
        return absl::StrCat(where, "expected a refusal \"", expected, " ...\", got ", created.ToString());
      }
      return "";
    }
    case TrainerOptionCase::Expect::kError:
      if (created.ok() || !absl::StrContains(created.message(), row.error)) {
        return absl::StrCat(where, "expected an error with \"", row.error, "\", got ", created.ToString());
      }
      return "";
    case TrainerOptionCase::Expect::kCompiledWith:
      if (!created.ok()) return absl::StrCat(where, "expected it compiled, got ", created.ToString());
      if (compiled == nullptr || !row.compiled_with(*compiled)) {
        return absl::StrCat(where, "the trainer did not compile with the value given");
      }
      return "";
  }
  return where + "unknown expectation";
}

}  // namespace magi
