// Calibration from the steps themselves: which runs are recorded, what the steps file
// holds after them (per-key means; a collective's duration from its start), how a later
// run folds into it (older samples weigh at most 4x the new), and that AutoCalibration
// takes those times before the micro-run cache and before measuring.
#include "magi/compiler/step_time_feedback.h"

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "magi/base/file.h"
#include "magi/base/gtest_printers.h"
#include "magi/compiler/auto_calibration.h"
#include "magi/ir/parser.h"

namespace magi {
namespace {

constexpr char kDevice[] = "test device, libtorch 0.0";

// Node order: neg, all_gather_start, exp, exp (same key as the first), wait, sum.
constexpr absl::string_view kStep = R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %x: f32[4]
    input %s: f32[8]
    %a = aten::neg(%x) : f32[4]
    %f = magi::all_gather_start([%s], group = "dp") : future<f32[16]>
    %b = aten::exp(%a) : f32[4]
    %c = aten::exp(%b) : f32[4]
    %w = magi::wait(%f) : f32[16]
    %y = aten::sum(%w, none) : f32[]
    output y = %y
    output c = %c
  }
}
)";

std::string FreshDir(const std::string& name) {
  std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

struct Keys {
  std::string neg, gather, exp, sum;
};

Keys KeysOf(const Graph& graph) {
  std::vector<Node*> nodes = graph.nodes();
  return {CalibrationTable::KeyOf(*nodes[0]), CalibrationTable::KeyOf(*nodes[1]), CalibrationTable::KeyOf(*nodes[2]),
          CalibrationTable::KeyOf(*nodes[5])};
}

// One run's node times, scaled by `scale`: the two exps take 2 and 4 us (mean 3), the
// gather's duration sits on its start and its wait is 0 (as the runtimes report a timed
// collective).
std::vector<double> RunTimes(double scale) {
  return {1e-6 * scale, 50e-6 * scale, 2e-6 * scale, 4e-6 * scale, 0.0, 5e-6 * scale};
}

class StepTimeFeedbackTest : public testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Module>> parsed = ParseModule(kStep);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    module = *std::move(parsed);
    graph = module->FindGraph("g");
    keys = KeysOf(*graph);
  }
  std::unique_ptr<Module> module;
  const Graph* graph = nullptr;
  Keys keys;
};

TEST_F(StepTimeFeedbackTest, RecordsTheRunsAfterTheWarmUpAndWritesAtDoublingPoints) {
  const std::string dir = FreshDir("doubling");

  StepTimeFeedback feedback(dir, kDevice, {/*skip_steps=*/1, /*first_save=*/2, /*max_steps=*/5});
  EXPECT_FALSE(feedback.Wants(1));
  EXPECT_TRUE(feedback.Wants(2));
  EXPECT_EQ(feedback.path(), dir + "/" + CalibrationCache::FileNameFor(kDevice, CalibrationSource::kSteps));
  EXPECT_NE(feedback.path(), dir + "/" + CalibrationCache::FileNameFor(kDevice));
  auto steps_file = [&] { return CalibrationCache::Open(dir, kDevice, CalibrationSource::kSteps); };

  ASSERT_TRUE(feedback.Add(1, *graph, RunTimes(100)).ok());  // not wanted: ignored
  ASSERT_TRUE(feedback.Add(2, *graph, RunTimes(1)).ok());
  EXPECT_FALSE(feedback.saved());
  EXPECT_FALSE(std::filesystem::exists(feedback.path()));
  ASSERT_TRUE(feedback.Add(3, *graph, RunTimes(3)).ok());  // 2 recorded: written
  EXPECT_TRUE(feedback.saved());
  EXPECT_EQ(feedback.summary(), absl::StrCat("calibration: 4 kernel times of steps 2-3 folded into ", feedback.path()));
  {
    CalibrationCache steps = steps_file();
    ASSERT_TRUE(steps.loaded()) << steps.warning();
    // Means over runs 2-3 (scales 1 and 3: mean scale 2); the exps' key over both nodes.
    EXPECT_DOUBLE_EQ(*steps.table().Find(keys.neg), 2e-6);
    EXPECT_DOUBLE_EQ(*steps.table().Find(keys.gather), 100e-6);
    EXPECT_DOUBLE_EQ(*steps.table().Find(keys.exp), 6e-6);
    EXPECT_EQ(steps.table().entries().at(keys.exp).count, 4);
    EXPECT_DOUBLE_EQ(*steps.table().Find(keys.sum), 10e-6);
    EXPECT_EQ(steps.table().size(), 4u);
  }
  ASSERT_TRUE(feedback.Add(4, *graph, RunTimes(5)).ok());  // 3 recorded: next write at 4
  EXPECT_DOUBLE_EQ(*steps_file().table().Find(keys.neg), 2e-6);
  ASSERT_TRUE(feedback.Add(5, *graph, RunTimes(7)).ok());  // 4: written again, replacing the first write
  {
    CalibrationCache steps = steps_file();
    EXPECT_DOUBLE_EQ(*steps.table().Find(keys.neg), 4e-6);
    EXPECT_EQ(steps.table().entries().at(keys.neg).count, 4);
    EXPECT_EQ(steps.table().entries().at(keys.exp).count, 8);
  }
  ASSERT_TRUE(feedback.Add(6, *graph, RunTimes(9)).ok());  // 5 = max_steps: the last, written
  EXPECT_FALSE(feedback.Wants(7));
  EXPECT_DOUBLE_EQ(*steps_file().table().Find(keys.neg), 5e-6);
  EXPECT_EQ(feedback.summary(), absl::StrCat("calibration: 4 kernel times of steps 2-6 folded into ", feedback.path()));
  // The micro-run cache is another file, untouched.
  EXPECT_FALSE(std::filesystem::exists(dir + "/" + CalibrationCache::FileNameFor(kDevice)));
}

// Runs of two graphs in turn (a trainer with an accumulation graph and a step graph): each
// graph's runs count once, whichever was recorded last.
TEST_F(StepTimeFeedbackTest, RunsOfTwoGraphsInTurnAllCount) {
  const std::string dir = FreshDir("two_graphs");
  absl::StatusOr<std::unique_ptr<Module>> other = ParseModule(R"(module @o {
  graph @h {
    input %x: f32[4]
    %a = aten::neg(%x) : f32[4]
    output a = %a
  }
}
)");
  ASSERT_TRUE(other.ok()) << other.status();
  const Graph& h = *(*other)->FindGraph("h");
  StepTimeFeedback feedback(dir, kDevice, {/*skip_steps=*/0, /*first_save=*/4, /*max_steps=*/8});
  ASSERT_TRUE(feedback.Add(1, *graph, RunTimes(1)).ok());
  ASSERT_TRUE(feedback.Add(2, h, {7e-6}).ok());
  ASSERT_TRUE(feedback.Add(3, *graph, RunTimes(3)).ok());
  ASSERT_TRUE(feedback.Add(4, h, {9e-6}).ok());  // 4 recorded: written
  CalibrationCache steps = CalibrationCache::Open(dir, kDevice, CalibrationSource::kSteps);
  ASSERT_TRUE(steps.loaded()) << steps.warning();
  // neg: 1 and 3 us in the step graph, 7 and 9 us in the other.
  EXPECT_EQ(steps.table().entries().at(keys.neg).count, 4);
  EXPECT_DOUBLE_EQ(*steps.table().Find(keys.neg), 5e-6);
  EXPECT_EQ(steps.table().entries().at(keys.exp).count, 4);
  EXPECT_DOUBLE_EQ(*steps.table().Find(keys.exp), 6e-6);
}

TEST_F(StepTimeFeedbackTest, ALaterRunFoldsInWithOlderSamplesWeighingAtMostFourTimesTheNew) {
  const std::string dir = FreshDir("fold");
  {
    StepTimeFeedback first(dir, kDevice, {0, 8, 8});
    for (int run = 1; run <= 8; ++run) ASSERT_TRUE(first.Add(run, *graph, RunTimes(1)).ok());
    ASSERT_TRUE(first.saved());
  }
  // One new sample of neg (2 us) against 8 old ones (1 us), capped at 4: (4 * 1 + 2) / 5.
  StepTimeFeedback second(dir, kDevice, {0, 1, 2});
  ASSERT_TRUE(second.Add(1, *graph, RunTimes(2)).ok());
  ASSERT_TRUE(second.saved());
  CalibrationCache steps = CalibrationCache::Open(dir, kDevice, CalibrationSource::kSteps);
  EXPECT_DOUBLE_EQ(*steps.table().Find(keys.neg), 1.2e-6);
  EXPECT_EQ(steps.table().entries().at(keys.neg).count, 5);
  EXPECT_DOUBLE_EQ(*steps.table().Find(keys.gather), 60e-6);
  // Its second write folds both of its samples into the same 8 old ones (cap 8), once.
  ASSERT_TRUE(second.Add(2, *graph, RunTimes(2)).ok());
  steps = CalibrationCache::Open(dir, kDevice, CalibrationSource::kSteps);
  EXPECT_DOUBLE_EQ(*steps.table().Find(keys.neg), 1.2e-6);  // (8 * 1 + 2 * 2) / 10
  EXPECT_EQ(steps.table().entries().at(keys.neg).count, 10);
  EXPECT_DOUBLE_EQ(*steps.table().Find(keys.gather), (8 * 50e-6 + 2 * 100e-6) / 10);
}

TEST_F(StepTimeFeedbackTest, FlushKeepsTheRunsAfterTheLastSavingPoint) {
  const std::string dir = FreshDir("flush");
  auto neg_count = [&] {
    return CalibrationCache::Open(dir, kDevice, CalibrationSource::kSteps).table().entries().at(keys.neg).count;
  };
  {
    StepTimeFeedback feedback(dir, kDevice, {0, 4, 64});
    for (int run = 1; run <= 3; ++run) ASSERT_TRUE(feedback.Add(run, *graph, RunTimes(1)).ok());
    ASSERT_TRUE(feedback.Flush().ok());  // 3 runs, fewer than the first saving point: nothing
    EXPECT_FALSE(std::filesystem::exists(feedback.path()));
    for (int run = 4; run <= 6; ++run) ASSERT_TRUE(feedback.Add(run, *graph, RunTimes(1)).ok());
    EXPECT_EQ(neg_count(), 4);  // written at 4 recorded runs; 5 and 6 not yet
    ASSERT_TRUE(feedback.Flush().ok());
    EXPECT_EQ(neg_count(), 6);
    EXPECT_EQ(feedback.summary(),
              absl::StrCat("calibration: 4 kernel times of steps 1-6 folded into ", feedback.path()));
    ASSERT_TRUE(feedback.Flush().ok());  // nothing new: the file stays as it is
    EXPECT_EQ(neg_count(), 6);
  }
}

TEST_F(StepTimeFeedbackTest, TimesThatDoNotMatchTheGraphAreRefused) {
  StepTimeFeedback feedback(FreshDir("mismatch"), kDevice, {0, 1, 1});
  absl::Status added = feedback.Add(1, *graph, {1e-6, 2e-6});
  EXPECT_EQ(added.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(added.message().find("2 times for a graph of 6 nodes"), std::string::npos) << added;
  EXPECT_FALSE(feedback.saved());
}

TEST_F(StepTimeFeedbackTest, AnUnwritableFolderIsAnErrorAndNotRetried) {
  const std::string blocker = FreshDir("blocker");
  ASSERT_TRUE(WriteFileAtomically(blocker, "a file where the folder would be").ok());
  StepTimeFeedback feedback(blocker + "/calibration", kDevice, {0, 1, 4});
  absl::Status added = feedback.Add(1, *graph, RunTimes(1));
  EXPECT_FALSE(added.ok());
  EXPECT_NE(added.message().find("cannot create the calibration cache folder"), std::string::npos) << added;
  EXPECT_FALSE(feedback.Wants(1));
  EXPECT_EQ(feedback.summary(), "");
}

// Measures nothing it knows; "measures" 1 s for the rest, and records what it measured.
class RecordingCalibrator : public KernelCalibrator {
 public:
  std::string DeviceKey() const override { return kDevice; }
  absl::StatusOr<std::vector<KernelTime>> Calibrate(const std::vector<KernelRequest>& requests) override {
    std::vector<KernelTime> times;
    for (const KernelRequest& request : requests) {
      if (request.known) {
        times.push_back({request.known, false, 0});
      } else {
        measured.push_back(CalibrationTable::KeyOf(*request.node));
        times.push_back({1.0, true, 3});
      }
    }
    return times;
  }
  std::vector<std::string> measured;
};

TEST_F(StepTimeFeedbackTest, AutoCalibrationTakesStepTimesBeforeMicroRunsAndMeasuresTheRest) {
  const std::string dir = FreshDir("prefer");
  // Micro-runs knew neg and exp; the steps knew neg and the gather.
  CalibrationCache micro = CalibrationCache::Open(dir, kDevice);
  micro.Set(keys.neg, 7e-6, 3);
  micro.Set(keys.exp, 8e-6, 3);
  ASSERT_TRUE(micro.Save().ok());
  CalibrationCache steps = CalibrationCache::Open(dir, kDevice, CalibrationSource::kSteps);
  steps.Set(keys.neg, 1e-6, 16);
  steps.Set(keys.gather, 90e-6, 8);
  ASSERT_TRUE(steps.Save().ok());

  auto calibrator = std::make_shared<RecordingCalibrator>();
  CalibrationTable table;
  AutoCalibration calibration(calibrator, dir, &table);
  ASSERT_TRUE(calibration.Calibrate(*graph).ok());
  EXPECT_EQ(table.Find(keys.neg), 1e-6);      // the steps' time, not the micro-run's
  EXPECT_EQ(table.Find(keys.gather), 90e-6);  // the steps'
  EXPECT_EQ(table.Find(keys.exp), 8e-6);      // the micro-run's
  EXPECT_EQ(table.Find(keys.sum), 1.0);       // measured now
  EXPECT_EQ(calibrator->measured, std::vector<std::string>{keys.sum});
  EXPECT_EQ(calibration.stats().from_steps, 2);
  EXPECT_EQ(calibration.stats().from_cache, 1);
  EXPECT_EQ(calibration.stats().measured, 1);
  EXPECT_NE(calibration.Summary().find(absl::StrCat("4 kernels, 2 from earlier steps in ", steps.path(),
                                                    ", 1 cached in ", micro.path(), ", 1 measured")),
            std::string::npos)
      << calibration.Summary();
  // What was measured went to the micro-run file, never into the steps file.
  EXPECT_TRUE(CalibrationCache::Open(dir, kDevice).table().Find(keys.sum).has_value());
  EXPECT_FALSE(CalibrationCache::Open(dir, kDevice, CalibrationSource::kSteps).table().Find(keys.sum).has_value());
}

}  // namespace
}  // namespace magi
