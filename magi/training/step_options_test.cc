// CheckTrainingCompileOptions: each field no trainer takes is refused by name; every other
// field passes. (Each trainer's own table of options: magi/frontend/fsdp:trainer_options_test
// and magi/frontend/fx:fx_trainer_options_test.)
#include "magi/training/step_options.h"

#include <functional>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"

namespace magi {
namespace {

TEST(CheckTrainingCompileOptionsTest, DefaultsAndTheCompilersOwnFieldsPass) {
  CompileOptions options;
  EXPECT_TRUE(CheckTrainingCompileOptions(options, "FsdpTrainer").ok());
  options.optimization.passes = "dce";
  options.optimization.memory_budget_bytes = 0;
  options.cost_model.device_profile = "h200";
  options.partitioning.backends = {"elementwise"};
  options.deterministic = true;
  options.expected_plan_hash = "0123456789abcdef";
  options.backend = "interpreter";
  EXPECT_TRUE(CheckTrainingCompileOptions(options, "FsdpTrainer").ok());
}

TEST(CheckTrainingCompileOptionsTest, FieldsNoTrainerTakesAreRefusedByName) {
  struct Case {
    std::string field;
    std::function<void(CompileOptions&)> set;
  };
  const Case cases[] = {
      {"sharding", [](CompileOptions& o) { o.sharding = FsdpPlan(); }},
      {"batch_invariant_sequences", [](CompileOptions& o) { o.batch_invariant_sequences = 4; }},
      {"optimization.weight_preparation", [](CompileOptions& o) { o.optimization.weight_preparation = true; }},
      {"cost_model.calibration_csv", [](CompileOptions& o) { o.cost_model.calibration_csv = "/tmp/t.csv"; }},
  };
  for (const Case& c : cases) {
    CompileOptions options;
    c.set(options);
    absl::Status status = CheckTrainingCompileOptions(options, "FxTrainer");
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_TRUE(absl::StrContains(status.message(), "FxTrainer does not take CompileOptions::" + c.field + ":"))
        << status;
  }
}

TEST(CheckTrainingCompileOptionsTest, OneSequenceIsNotBatchInvariance) {
  CompileOptions options;
  options.batch_invariant_sequences = 1;  // 0 or 1: compiled as captured
  EXPECT_TRUE(CheckTrainingCompileOptions(options, "FsdpTrainer").ok());
}

TEST(AddSplitMasterWeightsTest, EndsCanonicalization) {
  CompileOptions options;
  AddSplitMasterWeights(options);
  EXPECT_TRUE(absl::EndsWith(options.optimization.canonicalize, ",split-master-weights"))
      << options.optimization.canonicalize;
  options.optimization.canonicalize.clear();
  AddSplitMasterWeights(options);
  EXPECT_EQ(options.optimization.canonicalize, "split-master-weights");
}

}  // namespace
}  // namespace magi
