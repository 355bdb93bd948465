// FxTrainer honours every CompileOptions field or refuses it by name: the table every
// trainer runs (magi/training/trainer_options_table.h), its own calibration setting, and
// deterministic mode and an expected plan hash end to end, each checked on real one-rank
// runs (CPU + Gloo) of an exported joint graph. (FsdpTrainer's: magi/frontend/fsdp:
// trainer_options_test, deterministic_test, split_masters_training_test.)
//
// The test binary is its own worker: a gtest case launches it with the local launcher and
// MAGI_OPTIONS_WORKER naming the case; the worker exits 0 when every check held and writes
// what failed to stderr and to MAGI_TEST_OUT/error.
#include <ATen/ATen.h>

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "magi/base/status_macros.h"
#include "magi/frontend/fx/fx_importer.h"
#include "magi/frontend/fx/fx_trainer.h"
#include "magi/runtime/deterministic/deterministic.h"
#include "magi/runtime/gloo/self_launched_workers.h"
#include "magi/training/trainer_options_table.h"

namespace magi {
namespace {

std::string g_self;  // path of this binary
constexpr int kSteps = 3;
// tools/fx_models.py:bf16_mlp: fp32 weights the forward computes with in bf16.
constexpr char kJoint[] = "magi/frontend/fx/exported/bf16_mlp_joint.fx.json";


// calibration "none" by default: the formulas, no cache is read or written.
absl::StatusOr<std::unique_ptr<FxTrainer>> MakeTrainer(std::shared_ptr<Communicator> communicator,
                                                       const CompileOptions& compile,
                                                       const std::string& calibration = "none") {
  MAGI_ASSIGN_OR_RETURN(FxImport imported, ImportFxFile(kJoint));
  FxTrainOptions options;
  options.adamw.lr = 1e-2;
  options.compile = compile;
  options.calibration = calibration;
  return FxTrainer::Create(std::move(imported), std::move(communicator), options);
}

// kSteps steps on fixed batches; the losses.
absl::StatusOr<std::vector<double>> Train(FxTrainer& trainer) {
  std::vector<double> losses;
  for (int step = 0; step < kSteps; ++step) {
    at::manual_seed(100 + step);
    std::vector<at::Tensor> batch = {at::randn({4, 8}), at::randint(0, 4, {4}, at::TensorOptions().dtype(at::kLong))};
    MAGI_ASSIGN_OR_RETURN(double loss, trainer.Step(batch));
    losses.push_back(loss);
  }
  return losses;
}

absl::Status Check(bool condition, const std::string& what) {
  return condition ? absl::OkStatus() : absl::InternalError(what);
}

// The trainer reports the hash the plan compiled to; the same hash, expected, compiles;
// another one is refused naming both.
absl::Status RunPlanHash(std::shared_ptr<Communicator> communicator) {
  MAGI_ASSIGN_OR_RETURN(auto plain, MakeTrainer(communicator, {}));
  const std::string hash = plain->plan_hash();
  MAGI_RETURN_IF_ERROR(Check(hash.size() == 16, "plan hash '" + hash + "' is not 16 hex digits"));
  CompileOptions pinned;
  pinned.expected_plan_hash = hash;
  MAGI_ASSIGN_OR_RETURN(auto same, MakeTrainer(communicator, pinned));
  MAGI_RETURN_IF_ERROR(Check(same->plan_hash() == hash, "the pinned trainer compiled " + same->plan_hash()));
  CompileOptions wrong;
  wrong.expected_plan_hash = "0123456789abcdef";
  absl::StatusOr<std::unique_ptr<FxTrainer>> refused = MakeTrainer(communicator, wrong);
  MAGI_RETURN_IF_ERROR(Check(!refused.ok(), "a trainer was created with a wrong expected plan hash"));
  MAGI_RETURN_IF_ERROR(Check(refused.status().code() == absl::StatusCode::kFailedPrecondition &&
                                 absl::StrContains(refused.status().message(),
                                                   absl::StrCat("is ", hash, ", not the expected 0123456789abcdef")),
                             "unexpected error: " + refused.status().ToString()));
  return absl::OkStatus();
}

// Deterministic mode reaches the compile (it is part of the plan) and two deterministic
// trainers train the same bits.
absl::Status RunDeterministic(std::shared_ptr<Communicator> communicator) {
  MAGI_ASSIGN_OR_RETURN(auto plain, MakeTrainer(communicator, {}));
  CompileOptions deterministic;
  deterministic.deterministic = true;
  MAGI_ASSIGN_OR_RETURN(auto a, MakeTrainer(communicator, deterministic));
  MAGI_ASSIGN_OR_RETURN(auto b, MakeTrainer(communicator, deterministic));
  MAGI_RETURN_IF_ERROR(Check(a->plan_hash() != plain->plan_hash(), "deterministic mode left the plan unchanged"));
  MAGI_ASSIGN_OR_RETURN(std::vector<double> losses_a, Train(*a));
  MAGI_ASSIGN_OR_RETURN(std::vector<double> losses_b, Train(*b));
  MAGI_RETURN_IF_ERROR(Check(losses_a == losses_b, "two deterministic runs gave other losses"));
  for (const auto& [name, tensor] : a->state()) {
    MAGI_RETURN_IF_ERROR(Check(at::equal(tensor, b->state().at(name)), "two deterministic runs differ in " + name));
  }
  return absl::OkStatus();
}

// Deterministic mode without the process settings is refused by the backend (as FsdpTrainer's).
absl::Status RunDeterministicNotEnabled(std::shared_ptr<Communicator> communicator) {
  CompileOptions deterministic;
  deterministic.deterministic = true;
  absl::StatusOr<std::unique_ptr<FxTrainer>> refused = MakeTrainer(communicator, deterministic);
  MAGI_RETURN_IF_ERROR(Check(!refused.ok(), "a deterministic trainer was created without EnableDeterministicMode"));
  return Check(absl::StrContains(refused.status().message(), "call magi::EnableDeterministicMode()"),
               "unexpected error: " + refused.status().ToString());
}

// Every row of the trainers' table (trainer_options_table.h).
absl::Status RunTable(std::shared_ptr<Communicator> communicator) {
  std::string failures;
  for (const TrainerOptionCase& row : TrainerOptionCases()) {
    CompileOptions compile;
    row.set(compile);
    absl::StatusOr<std::unique_ptr<FxTrainer>> trainer = MakeTrainer(communicator, compile);
    const std::string failed = CheckTrainerOptionCase(
        row, trainer.status(), trainer.ok() ? &(*trainer)->compile_options() : nullptr, "FxTrainer");
    if (!failed.empty()) absl::StrAppend(&failures, failed, "\n");
  }
  return failures.empty() ? absl::OkStatus() : absl::InternalError(failures);
}

// The trainer's own calibration setting: "none" gives the compiler no table and no
// calibrator, a path gives it that table, and "" is refused.
absl::Status RunCalibration(std::shared_ptr<Communicator> communicator) {
  MAGI_ASSIGN_OR_RETURN(auto none, MakeTrainer(communicator, {}, "none"));
  MAGI_RETURN_IF_ERROR(Check(none->compile_options().cost_model.calibrator == nullptr &&
                                 none->compile_options().cost_model.calibration_csv.empty(),
                             "calibration \"none\" left a table or a calibrator"));
  absl::StatusOr<std::unique_ptr<FxTrainer>> table = MakeTrainer(communicator, {}, "/nonexistent/table.csv");
  MAGI_RETURN_IF_ERROR(Check(!table.ok() && absl::StrContains(table.status().message(), "/nonexistent/table.csv"),
                             "a missing calibration table was not reported: " + table.status().ToString()));
  absl::StatusOr<std::unique_ptr<FxTrainer>> empty = MakeTrainer(communicator, {}, "");
  return Check(!empty.ok() && absl::StrContains(empty.status().message(), "calibration: give auto, none"),
               "an empty calibration setting was not refused: " + empty.status().ToString());
}

absl::Status RunScenario(const std::string& scenario, std::shared_ptr<Communicator> communicator) {
  if (scenario == "plan_hash") return RunPlanHash(communicator);
  if (scenario == "deterministic") return RunDeterministic(communicator);
  if (scenario == "deterministic_not_enabled") return RunDeterministicNotEnabled(communicator);
  if (scenario == "table") return RunTable(communicator);
  if (scenario == "calibration") return RunCalibration(communicator);
  return absl::InvalidArgumentError("unknown case " + scenario);
}

// Runs case `scenario` on one rank; "" when it passed, else what failed.
std::string Launch(const std::string& scenario) { return LaunchWorkers(g_self, 1, "MAGI_OPTIONS_WORKER", scenario); }

TEST(FxTrainerOptionsTest, ExpectedPlanHashIsCheckedAndPlanHashReported) { EXPECT_EQ(Launch("plan_hash"), ""); }
TEST(FxTrainerOptionsTest, DeterministicModeIsCompiledAndReproducible) { EXPECT_EQ(Launch("deterministic"), ""); }
TEST(FxTrainerOptionsTest, DeterministicModeNeedsTheProcessSettings) {
  EXPECT_EQ(Launch("deterministic_not_enabled"), "");
}
TEST(FxTrainerOptionsTest, EveryCompileOptionIsHonouredOrRefused) { EXPECT_EQ(Launch("table"), ""); }
TEST(FxTrainerOptionsTest, CalibrationSettingReachesTheCostModel) { EXPECT_EQ(Launch("calibration"), ""); }

}  // namespace
}  // namespace magi

int main(int argc, char** argv) {
  magi::g_self = argv[0];
  if (const char* scenario = std::getenv("MAGI_OPTIONS_WORKER")) {
    const std::string name = scenario;
    return magi::RunGlooWorker(
        [&](std::shared_ptr<magi::Communicator> communicator) { return magi::RunScenario(name, communicator); },
        [&]() -> absl::Status {
          if (name != "deterministic") return absl::OkStatus();
          return magi::EnableDeterministicMode().status();  // before anything runs
        });
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
