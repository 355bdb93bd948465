// FsdpTrainer and FsdpInference honour every CompileOptions field or refuse it by name: the
// table every trainer runs (magi/training/trainer_options_table.h), FsdpTrainer's own
// settings (calibration, split_master_weights), and the fields FsdpInference sets itself.
// Real one-rank runs (CPU + Gloo) of a tiny Llama. (FxTrainer's: magi/frontend/fx:
// fx_trainer_options_test; deterministic mode end to end: deterministic_test.)
//
// The test binary is its own worker: a gtest case launches it with the local launcher and
// MAGI_OPTIONS_WORKER naming the case; the worker exits 0 when every check held and writes
// what failed to stderr and to MAGI_TEST_OUT/error.
#include <torch/torch.h>

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "magi/base/status_macros.h"
#include "magi/frontend/fsdp/fsdp.h"
#include "magi/models/llama.h"
#include "magi/runtime/gloo/self_launched_workers.h"
#include "magi/training/trainer_options_table.h"

namespace magi {
namespace {

std::string g_self;  // path of this binary


absl::Status Check(bool condition, const std::string& what) {
  return condition ? absl::OkStatus() : absl::InternalError(what);
}

// A one-rank FSDP Llama (tiny, 250 tokens) and its batches.
struct Model {
  explicit Model(std::shared_ptr<Communicator> c) : communicator(std::move(c)) {
    models::LlamaConfig config = models::LlamaConfig::Tiny();
    config.vocab_size = 250;
    torch::manual_seed(0);
    llama = models::Llama(config);
    DeviceMesh mesh = *DeviceMesh::Create({1}, {"dp"}, 0);
    for (auto& layer : llama->layers) FullyShard(*layer, mesh);
    FullyShard(*llama, mesh);
    torch::manual_seed(1);
    batch = {torch::randint(0, 250, {2, 8}), torch::randint(0, 250, {2, 8})};
  }
  absl::StatusOr<std::unique_ptr<FsdpTrainer>> Trainer(const CompileOptions& compile, TrainingOptions training) {
    LossFunction loss_fn = [this](const std::vector<at::Tensor>& in) {
      return models::LanguageModelLoss(llama->forward(in[0]), in[1]);
    };
    return FsdpTrainer::Create(*llama, loss_fn, batch, communicator, AdamWOptions(), {}, compile, training);
  }
  absl::StatusOr<std::unique_ptr<FsdpInference>> Inference(const InferenceOptions& options) {
    ForwardFunction forward = [this](const std::vector<at::Tensor>& in) {
      return std::vector<at::Tensor>{llama->forward(in[0])};
    };
    return FsdpInference::Create(*llama, forward, {batch[0]}, communicator, options);
  }
  std::shared_ptr<Communicator> communicator;
  models::Llama llama{nullptr};
  std::vector<at::Tensor> batch;
};

TrainingOptions Uncalibrated() {
  TrainingOptions training;
  training.calibration = "none";  // the formulas: no cache is read or written
  return training;
}

// Every row of the trainers' table.
absl::Status RunTable(std::shared_ptr<Communicator> communicator) {
  Model model(communicator);
  std::string failures;
  for (const TrainerOptionCase& row : TrainerOptionCases()) {
    CompileOptions compile;
    row.set(compile);
    absl::StatusOr<std::unique_ptr<FsdpTrainer>> trainer = model.Trainer(compile, Uncalibrated());
    const std::string failed = CheckTrainerOptionCase(
        row, trainer.status(), trainer.ok() ? &(*trainer)->compile_options() : nullptr, "FsdpTrainer");
    if (!failed.empty()) absl::StrAppend(&failures, failed, "\n");
  }
  return failures.empty() ? absl::OkStatus() : absl::InternalError(failures);
}

// TrainingOptions::calibration and ::split_master_weights.
absl::Status RunOwnOptions(std::shared_ptr<Communicator> communicator) {
  Model model(communicator);
  MAGI_ASSIGN_OR_RETURN(auto none, model.Trainer({}, Uncalibrated()));
  const CostModelOptions& cost = none->compile_options().cost_model;
  MAGI_RETURN_IF_ERROR(Check(cost.calibrator == nullptr && cost.calibration_csv.empty(),
                             "calibration \"none\" left a table or a calibrator"));
  TrainingOptions table = Uncalibrated();
  table.calibration = "/nonexistent/table.csv";
  absl::StatusOr<std::unique_ptr<FsdpTrainer>> missing = model.Trainer({}, table);
  MAGI_RETURN_IF_ERROR(Check(!missing.ok() && absl::StrContains(missing.status().message(), "/nonexistent/table.csv"),
                             "a missing calibration table was not reported: " + missing.status().ToString()));
  TrainingOptions empty = Uncalibrated();
  empty.calibration = "";
  absl::StatusOr<std::unique_ptr<FsdpTrainer>> refused = model.Trainer({}, empty);
  MAGI_RETURN_IF_ERROR(Check(!refused.ok() && absl::StrContains(refused.status().message(), "calibration: give auto"),
                             "an empty calibration setting was not refused: " + refused.status().ToString()));
  // An fp32 model has no shard that is only cast to bf16: the pass runs, finds none, and
  // the trainer says so in its notes.
  TrainingOptions split = Uncalibrated();
  split.split_master_weights = true;
  MAGI_ASSIGN_OR_RETURN(auto fp32_split, model.Trainer({}, split));
  MAGI_RETURN_IF_ERROR(
      Check(absl::EndsWith(fp32_split->compile_options().optimization.canonicalize, "split-master-weights"),
            "split_master_weights did not reach canonicalization: " +
                fp32_split->compile_options().optimization.canonicalize));
  return Check(fp32_split->split_state().empty(), "an fp32 model's masters were split");
}

// FsdpInference refuses the fields it sets itself.
absl::Status RunInference(std::shared_ptr<Communicator> communicator) {
  Model model(communicator);
  model.llama->eval();
  struct Row {
    std::string field;
    std::function<void(CompileOptions&)> set;
  };
  const Row rows[] = {
      {"sharding", [](CompileOptions& o) { o.sharding = FsdpPlan(); }},
      {"batch_invariant_sequences", [](CompileOptions& o) { o.batch_invariant_sequences = 2; }},
      {"optimization.weight_preparation", [](CompileOptions& o) { o.optimization.weight_preparation = true; }},
      {"cost_model.calibration_csv", [](CompileOptions& o) { o.cost_model.calibration_csv = "/tmp/t.csv"; }},
  };
  std::string failures;
  for (const Row& row : rows) {
    InferenceOptions options;
    row.set(options.compile);
    absl::StatusOr<std::unique_ptr<FsdpInference>> inference = model.Inference(options);
    const std::string expected = "FsdpInference does not take CompileOptions::" + row.field + ":";
    if (inference.ok() || inference.status().code() != absl::StatusCode::kInvalidArgument ||
        !absl::StrContains(inference.status().message(), expected)) {
      absl::StrAppend(&failures, row.field, ": expected \"", expected, " ...\", got ", inference.status().ToString(),
                      "\n");
    }
  }
  // What it does take reaches the compile (an unknown backend is named).
  InferenceOptions unknown;
  unknown.compile.backend = "no-such-backend";
  absl::StatusOr<std::unique_ptr<FsdpInference>> inference = model.Inference(unknown);
  if (inference.ok() || !absl::StrContains(inference.status().message(), "no-such-backend")) {
    absl::StrAppend(&failures, "backend: not reached: ", inference.status().ToString(), "\n");
  }
  return failures.empty() ? absl::OkStatus() : absl::InternalError(failures);
}

absl::Status RunScenario(const std::string& scenario, std::shared_ptr<Communicator> communicator) {
  if (scenario == "table") return RunTable(communicator);
  if (scenario == "own") return RunOwnOptions(communicator);
  if (scenario == "inference") return RunInference(communicator);
  return absl::InvalidArgumentError("unknown case " + scenario);
}

// Runs case `scenario` on one rank; "" when it passed, else what failed.
std::string Launch(const std::string& scenario) { return LaunchWorkers(g_self, 1, "MAGI_OPTIONS_WORKER", scenario); }

TEST(FsdpTrainerOptionsTest, EveryCompileOptionIsHonouredOrRefused) { EXPECT_EQ(Launch("table"), ""); }
TEST(FsdpTrainerOptionsTest, CalibrationAndSplitMasterWeights) { EXPECT_EQ(Launch("own"), ""); }
TEST(FsdpInferenceOptionsTest, FieldsItSetsItselfAreRefused) { EXPECT_EQ(Launch("inference"), ""); }

}  // namespace
}  // namespace magi

int main(int argc, char** argv) {
  magi::g_self = argv[0];
  if (const char* scenario = std::getenv("MAGI_OPTIONS_WORKER")) {
    const std::string name = scenario;
    return magi::RunGlooWorker(
        [&](std::shared_ptr<magi::Communicator> communicator) { return magi::RunScenario(name, communicator); });
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
