// Calibration by default through the compile driver, with a calibrator that "measures"
// deterministic times and counts what it was asked: the cache is written on the first
// compile and reused on the next, a missing key is measured and added, a corrupt cache is
// measured again with a warning, and the table the compile used is the prediction's.
#include "magi/compiler/auto_calibration.h"

#include <cstdlib>
#include <filesystem>
#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "magi/base/file.h"
#include "magi/base/gtest_printers.h"
#include "magi/compiler/compiler.h"
#include "magi/ir/magi_ops.h"
#include "magi/ir/parser.h"
#include "magi/ir/printer.h"
#include "magi/passes/pass_test_util.h"
#include "magi/registry/registry.h"

namespace magi {
namespace {

using testing::LoadTestdata;

class NullExecutable : public Executable {
 public:
  absl::string_view backend_name() const override { return "null"; }
};
class NullBackend : public Backend {
 public:
  absl::string_view name() const override { return "null"; }
  Capability GetCapability(const Module&, const Graph&) const override { return {}; }
  using Backend::Compile;
  absl::StatusOr<std::unique_ptr<Executable>> Compile(const Module&, const Graph&,
                                                      const CompileContext&) const override {
    return std::unique_ptr<Executable>(new NullExecutable());
  }
};
MAGI_REGISTER(Backend, "null", [](const ComponentOptions&) -> absl::StatusOr<std::unique_ptr<Backend>> {
  return std::make_unique<NullBackend>();
});

// A partition backend that takes exp and neg and declines the rest; its executables name
// their code by the option `code` (as the inductor package's hash would).
class CodedExecutable : public Executable {
 public:
  explicit CodedExecutable(std::string code) : code_(std::move(code)) {}
  absl::string_view backend_name() const override { return "pointwise-test"; }
  std::string code_key() const override { return code_; }

 private:
  std::string code_;
};
class PointwiseBackend : public Backend {
 public:
  explicit PointwiseBackend(std::string code) : code_(std::move(code)) {}
  absl::string_view name() const override { return "pointwise-test"; }
  Capability GetCapability(const Module&, const Graph& graph) const override {
    Capability capability;
    for (const Node* node : graph.nodes()) {
      if (node->op() != "aten::exp" && node->op() != "aten::neg") capability.unsupported.push_back({node, "not exp or neg"});
    }
    return capability;
  }
  using Backend::Compile;
  absl::StatusOr<std::unique_ptr<Executable>> Compile(const Module&, const Graph&,
                                                      const CompileContext&) const override {
    return std::unique_ptr<Executable>(new CodedExecutable(code_));
  }

 private:
  std::string code_;
};
MAGI_REGISTER(Backend, "pointwise-test", [](const ComponentOptions& options) -> absl::StatusOr<std::unique_ptr<Backend>> {
  auto code = options.find("code");
  return std::make_unique<PointwiseBackend>(code == options.end() ? "" : code->second);
});

// "Measures" 3x the cpu profile's formula plus 1 us, and records every key it measured.
class CountingCalibrator : public KernelCalibrator {
 public:
  // What every partition call "allocates while it runs": three f32[256,256].
  static constexpr int64_t kCallWorkingBytes = 3 * 262144;
  std::string DeviceKey() const override { return "test device, libtorch 0.0"; }
  absl::StatusOr<std::vector<KernelTime>> Calibrate(const std::vector<KernelRequest>& requests) override {
    ++calls;
    CostModel formula(*LoadDeviceProfile("cpu"));
    std::vector<KernelTime> times;
    for (const KernelRequest& request : requests) {
      if (request.known) {
        times.push_back({request.known, false, 0, request.known_working_bytes});
        continue;
      }
      measured.push_back(CalibrationTable::KeyOf(*request.node));
      if (request.node->op().find("_start") != std::string::npos) {
        issues[measured.back()] = request.issues;
      }
      times.push_back({3 * formula.Cost(*request.node).seconds + 1e-6, true, 3});
      if (request.callee != nullptr) times.back().working_bytes = kCallWorkingBytes;
    }
    return times;
  }
  int calls = 0;
  std::vector<std::string> measured;
  std::map<std::string, std::vector<CollectiveIssue>> issues;  // of each collective measured
};

std::string FreshDir(const std::string& name) {
  std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

CompileOptions CalibratedOptions(const std::string& cache_dir, std::shared_ptr<KernelCalibrator> calibrator) {
  CompileOptions options;
  options.backend = "null";
  options.partitioning.log = false;
  options.cost_model.calibrator = std::move(calibrator);
  options.cost_model.calibration_cache_dir = cache_dir;
  // Bucketing makes collectives of new sizes: the second calibration round's work.
  options.optimization.passes = "bucket-collectives{max_mb=1},schedule-overlap{prefetch=2}";
  return options;
}

// The distinct keys of every kernel of `graph` (what the table must time).
std::set<std::string> KernelKeys(const Graph& graph) {
  std::set<std::string> keys;
  for (const Node* node : graph.nodes()) {
    if (node->op() != "magi::wait" && node->op() != "magi::call") keys.insert(CalibrationTable::KeyOf(*node));
  }
  return keys;
}

TEST(AutoCalibrationTest, TheFirstCompileMeasuresAndCachesTheSecondReusesIt) {
  const std::string dir = FreshDir("first_second");
  auto first = std::make_shared<CountingCalibrator>();
  absl::StatusOr<CompiledStep> a = Compile(LoadTestdata("llama4_fsdp_step.mir"), "train_step",
                                           CalibratedOptions(dir, first));
  ASSERT_TRUE(a.ok()) << a.status();
  // Two rounds (the sharded step, then what bucketing added), each asking for compute kernels
  // then collectives (also when there are none: every rank makes the same calls).
  EXPECT_EQ(first->calls, 4);
  const std::set<std::string> keys = KernelKeys(a->graph());
  std::set<std::string> measured(first->measured.begin(), first->measured.end());
  EXPECT_EQ(measured.size(), first->measured.size()) << "a key was measured twice";
  for (const std::string& key : keys) EXPECT_TRUE(measured.count(key)) << key;

  // Each collective was measured after the compute the step runs before each of its
  // issues: the table's times of the kernels since the previous collective, in step order
  // (here the first collective key of the step; its first issue follows the previous
  // run's compute after the last collective too).
  const std::unique_ptr<Module> sharded = LoadTestdata("llama4_fsdp_step.mir");
  std::map<std::string, std::vector<double>> since_by_key;
  std::string first_key;
  double since = 0;
  for (const Node* node : sharded->FindGraph("train_step")->nodes()) {
    if (node->op() == "magi::wait") continue;
    const std::string key = CalibrationTable::KeyOf(*node);
    if (node->op().find("_start") != std::string::npos) {
      if (first_key.empty()) first_key = key;
      since_by_key[key].push_back(since);
      since = 0;
    } else {
      since += *a->calibration->Find(key);
    }
  }
  std::vector<double> occurrences = since_by_key.at(first_key);
  occurrences[0] += since;
  const std::vector<CollectiveIssue>& issues = first->issues.at(first_key);
  ASSERT_EQ(issues.size(), occurrences.size());
  ASSERT_GT(issues.size(), 1u);
  for (size_t i = 0; i < issues.size(); ++i) EXPECT_EQ(issues[i].compute_before_seconds, occurrences[i]) << i;
  EXPECT_NE(occurrences.front(), occurrences.back());  // the issues differ
  // The sharded step waits for each collective right after starting it: nothing overlaps.
  // The collectives bucketing and prefetching made run beside compute, and were measured
  // with what they overlap: the compute between their start and their wait.
  for (const CollectiveIssue& issue : issues) EXPECT_EQ(issue.compute_during_seconds, 0);
  int overlapped = 0;
  for (const auto& [key, of_key] : first->issues) {
    for (const CollectiveIssue& issue : of_key) overlapped += issue.compute_during_seconds > 0;
  }
  EXPECT_GT(overlapped, 0);

  // The table the prediction used: every kernel of the compiled graph, the cached values.
  ASSERT_NE(a->calibration, nullptr);
  CalibrationCache cache = CalibrationCache::Open(dir, "test device, libtorch 0.0");
  EXPECT_TRUE(cache.loaded());
  EXPECT_EQ(cache.warning(), "");
  for (const std::string& key : keys) {
    ASSERT_TRUE(a->calibration->Find(key).has_value()) << key;
    EXPECT_EQ(a->calibration->Find(key), cache.table().Find(key)) << key;
  }
  CostModel replay(*LoadDeviceProfile("cpu"), a->calibration.get());
  absl::StatusOr<SimulationResult> replayed = Simulate(a->graph(), replay);
  ASSERT_TRUE(replayed.ok());
  EXPECT_EQ(replayed->step_seconds, a->optimized.prediction.step_seconds);
  EXPECT_EQ(replayed->peak_bytes, a->optimized.prediction.peak_bytes);
  CostModel formula(*LoadDeviceProfile("cpu"));
  EXPECT_NE(Simulate(a->graph(), formula)->step_seconds, a->optimized.prediction.step_seconds);
  // (More than the compiled graph's: the collectives bucketing fused were measured first.)
  EXPECT_GT(measured.size(), keys.size());
  EXPECT_NE(a->optimized.calibration_summary.find(absl::StrCat(measured.size(), " kernels, 0 cached in ", cache.path(),
                                                               ", ", measured.size(), " measured")),
            std::string::npos)
      << a->optimized.calibration_summary;

  // The second compile measures nothing and predicts the same, bit for bit.
  auto second = std::make_shared<CountingCalibrator>();
  absl::StatusOr<CompiledStep> b = Compile(LoadTestdata("llama4_fsdp_step.mir"), "train_step",
                                           CalibratedOptions(dir, second));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(second->measured.empty());
  EXPECT_EQ(b->optimized.prediction.step_seconds, a->optimized.prediction.step_seconds);
  EXPECT_EQ(b->plan_hash, a->plan_hash);
  EXPECT_NE(b->optimized.calibration_summary.find(
                absl::StrCat(measured.size(), " kernels, ", measured.size(), " cached in")),
            std::string::npos)
      << b->optimized.calibration_summary;
  // Each run names the cached table it read (path and hash) and the table it planned with.
  EXPECT_NE(a->optimized.calibration_summary.find(
                absl::StrCat("; read no cached table; planned with table ", CalibrationCache::HashOf(*a->calibration))),
            std::string::npos)
      << a->optimized.calibration_summary;
  EXPECT_NE(b->optimized.calibration_summary.find(absl::StrCat("; read ", cache.path(), " (table ", cache.hash(),
                                                               "); planned with table ",
                                                               CalibrationCache::HashOf(*b->calibration))),
            std::string::npos)
      << b->optimized.calibration_summary;
  EXPECT_EQ(b->optimized.calibration_stats.table_path, cache.path());
  EXPECT_EQ(b->optimized.calibration_stats.table_hash, cache.hash());
  EXPECT_EQ(b->optimized.calibration_stats.planned_hash, a->optimized.calibration_stats.planned_hash);
}

// Another process that saves into the cache while a compile runs (here: as the compile
// first asks its calibrator) changes nothing of that compile: it plans and predicts with
// the file as it read it plus what it measured, exactly as without the other writer.
class InterferingCalibrator : public CountingCalibrator {
 public:
  InterferingCalibrator(std::string dir, CalibrationTable theirs) : dir_(std::move(dir)), theirs_(std::move(theirs)) {}
  absl::StatusOr<std::vector<KernelTime>> Calibrate(const std::vector<KernelRequest>& requests) override {
    if (!interfered_) {
      interfered_ = true;
      CalibrationCache cache = CalibrationCache::Open(dir_, DeviceKey());
      for (const auto& [key, entry] : theirs_.entries()) cache.Set(key, entry.mean_seconds, entry.count);
      if (absl::Status saved = cache.Save(); !saved.ok()) return saved;
    }
    return CountingCalibrator::Calibrate(requests);
  }

 private:
  std::string dir_;
  CalibrationTable theirs_;
  bool interfered_ = false;
};

TEST(AutoCalibrationTest, AWriterDuringTheCompileChangesNothingOfIt) {
  const std::string alone_dir = FreshDir("alone");
  absl::StatusOr<CompiledStep> alone = Compile(LoadTestdata("llama4_fsdp_step.mir"), "train_step",
                                               CalibratedOptions(alone_dir, std::make_shared<CountingCalibrator>()));
  ASSERT_TRUE(alone.ok()) << alone.status();
  // The other process's times: 7x every kernel's, the kernels bucketing makes included.
  CalibrationTable theirs;
  const CalibrationCache measured_alone = CalibrationCache::Open(alone_dir, "test device, libtorch 0.0");
  for (const auto& [key, entry] : measured_alone.table().entries()) {
    theirs.Set(key, entry.mean_seconds * 7, entry.count);
  }
  const std::string dir = FreshDir("interfered");
  auto calibrator = std::make_shared<InterferingCalibrator>(dir, theirs);
  absl::StatusOr<CompiledStep> step =
      Compile(LoadTestdata("llama4_fsdp_step.mir"), "train_step", CalibratedOptions(dir, calibrator));
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->optimized.calibration_stats.from_cache, 0);
  EXPECT_EQ(step->optimized.calibration_stats.planned_hash, alone->optimized.calibration_stats.planned_hash);
  EXPECT_EQ(step->optimized.prediction.step_seconds, alone->optimized.prediction.step_seconds);
  EXPECT_EQ(step->plan_hash, alone->plan_hash);
  // What it measured went into the file beside the other process's entries (its own win).
  CalibrationCache after = CalibrationCache::Open(dir, "test device, libtorch 0.0");
  for (const std::string& key : KernelKeys(step->graph())) {
    EXPECT_EQ(after.table().Find(key), step->calibration->Find(key)) << key;
  }
}

// Deterministic mode plans from the pinned table: after a first deterministic compile
// pinned its times, other processes rewriting the micro-run cache and the steps' times
// change the plan of a default compile but not of a deterministic one.
TEST(AutoCalibrationTest, DeterministicCompilesPlanFromThePinnedTable) {
  constexpr char kDevice[] = "test device, libtorch 0.0";
  const std::string dir = FreshDir("pinned");
  auto options_for = [&dir](bool deterministic) {
    CompileOptions options = CalibratedOptions(dir, std::make_shared<CountingCalibrator>());
    options.deterministic = deterministic;
    options.optimization.passes = "";
    options.optimization.memory_budget_bytes = 1750000;
    options.optimization.search.bucket_mb = {0, 1};
    options.optimization.search.prefetch = {-1, 0, 2};
    return options;
  };
  absl::StatusOr<CompiledStep> first = Compile(LoadTestdata("llama4_fsdp_step.mir"), "train_step", options_for(true));
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string pinned_path = dir + "/" + CalibrationCache::FileNameFor(kDevice, CalibrationSource::kPinned);
  CalibrationCache pinned = CalibrationCache::Open(dir, kDevice, CalibrationSource::kPinned);
  ASSERT_TRUE(pinned.loaded()) << pinned.warning();
  for (const std::string& key : KernelKeys(first->graph())) {
    EXPECT_EQ(pinned.table().Find(key), first->calibration->Find(key)) << key;
  }
  EXPECT_EQ(first->optimized.calibration_stats.table_path, pinned_path);
  EXPECT_NE(first->optimized.calibration_summary.find(absl::StrCat("0 pinned in ", pinned_path, ", ")),
            std::string::npos)
      << first->optimized.calibration_summary;

  // Other processes: a micro-run cache and steps' times of their own for every kernel.
  CalibrationCache micro = CalibrationCache::Open(dir, kDevice);
  CalibrationCache steps = CalibrationCache::Open(dir, kDevice, CalibrationSource::kSteps);
  int i = 0;
  const CalibrationTable measured = micro.table();
  for (const auto& [key, entry] : measured.entries()) {
    micro.Set(key, entry.mean_seconds * (++i % 3 == 0 ? 40 : 0.5), entry.count);
    steps.Set(key, entry.mean_seconds * (i % 2 == 0 ? 30 : 0.2), entry.count);
  }
  ASSERT_TRUE(micro.Save().ok());
  ASSERT_TRUE(steps.Save().ok());
  // (A default compile plans with their times: the search left out, it is slow.)
  CompileOptions by_default_options = options_for(false);
  by_default_options.optimization.memory_budget_bytes = 0;
  absl::StatusOr<CompiledStep> by_default =
      Compile(LoadTestdata("llama4_fsdp_step.mir"), "train_step", by_default_options);
  ASSERT_TRUE(by_default.ok()) << by_default.status();
  EXPECT_EQ(by_default->optimized.calibration_stats.measured, 0);
  EXPECT_NE(by_default->optimized.calibration_stats.planned_hash, first->optimized.calibration_stats.planned_hash);

  absl::StatusOr<CompiledStep> again = Compile(LoadTestdata("llama4_fsdp_step.mir"), "train_step", options_for(true));
  ASSERT_TRUE(again.ok()) << again.status();
  const CalibrationStats& stats = again->optimized.calibration_stats;
  EXPECT_EQ(stats.measured, 0);
  EXPECT_EQ(stats.from_pinned, stats.kernels);
  EXPECT_EQ(again->plan_hash, first->plan_hash);
  EXPECT_EQ(again->optimized.applied_pipeline, first->optimized.applied_pipeline);
  EXPECT_EQ(again->optimized.prediction.step_seconds, first->optimized.prediction.step_seconds);
  EXPECT_EQ(again->optimized.prediction.peak_bytes, first->optimized.prediction.peak_bytes);
  EXPECT_EQ(stats.planned_hash, first->optimized.calibration_stats.planned_hash);
  EXPECT_EQ(stats.table_path, pinned_path);
  EXPECT_EQ(stats.table_hash, CalibrationCache::Open(dir, kDevice, CalibrationSource::kPinned).hash());
  EXPECT_NE(again->optimized.calibration_summary.find(
                absl::StrCat(stats.kernels, " pinned in ", pinned_path, ", 0 cached in")),
            std::string::npos)
      << again->optimized.calibration_summary;
  EXPECT_NE(again->optimized.calibration_summary.find(absl::StrCat("; read ", pinned_path, " (table ", stats.table_hash, ")")),
            std::string::npos)
      << again->optimized.calibration_summary;
}

TEST(AutoCalibrationTest, AMissingKeyIsMeasuredAndAdded) {
  const std::string dir = FreshDir("missing");
  ASSERT_TRUE(Compile(LoadTestdata("llama4_fsdp_step.mir"), "train_step",
                      CalibratedOptions(dir, std::make_shared<CountingCalibrator>()))
                  .ok());
  CalibrationCache cache = CalibrationCache::Open(dir, "test device, libtorch 0.0");
  ASSERT_GT(cache.table().size(), 2u);
  // Drop one entry from the file (as an older cache of a smaller model would lack it).
  const std::string dropped = std::next(cache.table().entries().begin(), 2)->first;
  CalibrationTable fewer;
  for (const auto& [key, entry] : cache.table().entries()) {
    if (key != dropped) fewer.Set(key, entry.mean_seconds, entry.count);
  }
  absl::StatusOr<std::string> text = ReadFile(cache.path());
  ASSERT_TRUE(text.ok());
  ASSERT_TRUE(fewer.Save(cache.path(), "magi calibration cache v2\ndevice: test device, libtorch 0.0").ok());

  auto calibrator = std::make_shared<CountingCalibrator>();
  absl::StatusOr<CompiledStep> step =
      Compile(LoadTestdata("llama4_fsdp_step.mir"), "train_step", CalibratedOptions(dir, calibrator));
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(calibrator->measured, std::vector<std::string>{dropped});
  EXPECT_TRUE(CalibrationCache::Open(dir, "test device, libtorch 0.0").table().Find(dropped).has_value());
  EXPECT_EQ(ReadFile(cache.path()).value(), *text);  // back as it was
}

TEST(AutoCalibrationTest, ACorruptCacheIsMeasuredAgainWithAWarning) {
  const std::string dir = FreshDir("corrupt");
  const std::string path = dir + "/" + CalibrationCache::FileNameFor("test device, libtorch 0.0");
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(WriteFileAtomically(path, "# magi calibration cache v2\n# device: test device, libtorch 0.0\n"
                                        "garbage\n")
                  .ok());
  auto calibrator = std::make_shared<CountingCalibrator>();
  CompileOptions options = CalibratedOptions(dir, calibrator);
  absl::StatusOr<CompiledStep> step = Compile(LoadTestdata("llama4_fsdp_step.mir"), "train_step", options);
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_FALSE(step->notes.empty());
  EXPECT_EQ(step->notes[0], "warning: calibration cache " + path +
                                ":3: expected 'mean_seconds,count,key' or 'mean_seconds,count,working_bytes=N,key', got 'garbage'; "
                "the cached times are ignored, "
                                "measured again and the file replaced");
  EXPECT_NE(step->optimized.calibration_summary.find(absl::StrCat(" kernels, 0 cached in ")), std::string::npos)
      << step->optimized.calibration_summary;
  for (const std::string& key : KernelKeys(step->graph())) {
    EXPECT_NE(std::find(calibrator->measured.begin(), calibrator->measured.end(), key), calibrator->measured.end());
  }
  CalibrationCache repaired = CalibrationCache::Open(dir, "test device, libtorch 0.0");
  EXPECT_TRUE(repaired.loaded());
  EXPECT_EQ(repaired.table().size(), calibrator->measured.size());
}

TEST(AutoCalibrationTest, TheSearchDecidesWithTheMeasuredTable) {
  const std::string dir = FreshDir("search");
  auto calibrator = std::make_shared<CountingCalibrator>();
  CompileOptions options = CalibratedOptions(dir, calibrator);
  options.optimization.passes = "";
  options.optimization.canonicalize = "";
  options.optimization.memory_budget_bytes = 1750000;  // below every plan without recompute
  options.optimization.search.bucket_mb = {0, 1};
  options.optimization.search.prefetch = {-1, 0, 2};
  absl::StatusOr<CostModelBundle> cost = MakeCostModel(options.cost_model);
  ASSERT_TRUE(cost.ok()) << cost.status();
  absl::StatusOr<OptimizedStep> step = OptimizeStep(LoadTestdata("llama4_fsdp_step.mir"), "train_step", options, *cost);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_NE(step->applied_pipeline.find("auto-recompute"), std::string::npos) << step->applied_pipeline;

  // The same search with the first round's times given as a table finds the same plan.
  std::unique_ptr<Module> sharded = LoadTestdata("llama4_fsdp_step.mir");
  CalibrationTable first_round;
  for (const std::string& key : KernelKeys(*sharded->FindGraph("train_step"))) {
    first_round.Set(key, *cost->calibration->Find(key));
  }
  CostModel given(*LoadDeviceProfile("cpu"), &first_round);
  absl::StatusOr<StrategyPlan> plan = SearchStrategy(*sharded, "train_step", given, options.optimization.memory_budget_bytes,
                                                     options.optimization.search);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->pipeline, step->applied_pipeline);
  EXPECT_EQ(PrintModule(*plan->optimized), PrintModule(*step->module));
  // And the prediction is the simulation with the final table (the fused kernels measured too).
  CostModel final_table(*LoadDeviceProfile("cpu"), cost->calibration.get());
  EXPECT_EQ(Simulate(step->graph(), final_table)->step_seconds, step->prediction.step_seconds);
}

TEST(AutoCalibrationTest, ATableAndACalibratorAreNotBoth) {
  CostModelOptions options;
  options.calibration_csv = "/some/table.csv";
  options.calibrator = std::make_shared<CountingCalibrator>();
  absl::StatusOr<CostModelBundle> cost = MakeCostModel(options);
  EXPECT_EQ(cost.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cost.status().message(),
            "give a calibration table (/some/table.csv) or a calibrator that measures one, not both");
}

TEST(AutoCalibrationTest, AnUnwritableCacheIsAWarningAndTheTimesStillServe) {
  const std::string blocker = FreshDir("unwritable");
  ASSERT_TRUE(WriteFileAtomically(blocker, "a file where the cache folder should be").ok());
  auto calibrator = std::make_shared<CountingCalibrator>();
  absl::StatusOr<CompiledStep> step = Compile(LoadTestdata("llama4_fsdp_step.mir"), "train_step",
                                              CalibratedOptions(blocker + "/calibration", calibrator));
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_EQ(step->notes.size(), 2u);  // one per round that measured
  EXPECT_NE(step->notes[0].find("warning: cannot create the calibration cache folder " + blocker + "/calibration"),
            std::string::npos)
      << step->notes[0];
  EXPECT_NE(step->notes[0].find("times measured now serve this compile only"), std::string::npos) << step->notes[0];
  for (const std::string& key : KernelKeys(step->graph())) EXPECT_TRUE(step->calibration->Find(key)) << key;
}

// After partitioning, each distinct compiled partition is measured by itself (one request
// per structure, with its executable), cached under its code key, and the step predicted
// again with those times; a recompile with the same code reads the cache, another code is
// measured again.
TEST(AutoCalibrationTest, CompiledPartitionsAreMeasuredAndThePartitionedStepPredicted) {
  constexpr absl::string_view kStep = R"(module @m {
  graph @step {
    input %x: f32[256,256]
    input %w: f32[256,256] {role = param}
    %e0 = aten::exp(%x) : f32[256,256]
    %n0 = aten::neg(%e0) : f32[256,256]
    %h0 = aten::mm(%n0, %w) : f32[256,256]
    %e1 = aten::exp(%h0) : f32[256,256]
    %n1 = aten::neg(%e1) : f32[256,256]
    %h1 = aten::mm(%n1, %w) : f32[256,256]
    %n2 = aten::neg(%h1) : f32[256,256]
    output y = %n2
  }
}
)";
  const std::string dir = FreshDir("partitions");
  auto compile = [&](const std::string& code, std::shared_ptr<CountingCalibrator> calibrator) {
    CompileOptions options;
    options.backend = "null";
    options.partitioning.log = false;
    options.partitioning.backends = {absl::StrCat("pointwise-test{code=", code, "}")};
    options.cost_model.device_profile = "cpu";
    options.cost_model.calibrator = std::move(calibrator);
    options.cost_model.calibration_cache_dir = dir;
    absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
    EXPECT_TRUE(module.ok()) << module.status();
    return Compile(*std::move(module), "step", options);
  };
  auto first = std::make_shared<CountingCalibrator>();
  absl::StatusOr<CompiledStep> step = compile("A", first);
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_EQ(step->partitions.size(), 3u);
  std::set<std::string> call_keys;
  for (const Node* node : step->graph().nodes()) {
    if (node->op() == kCallOp) call_keys.insert(CalibrationTable::KeyOf(*node));
  }
  ASSERT_EQ(call_keys.size(), 2u);  // exp+neg twice (one structure), neg once
  std::set<std::string> measured_calls;
  for (const std::string& key : first->measured) {
    if (call_keys.count(key)) measured_calls.insert(key);
  }
  EXPECT_EQ(measured_calls, call_keys);
  EXPECT_EQ(std::count_if(first->measured.begin(), first->measured.end(),
                          [&](const std::string& key) { return call_keys.count(key) > 0; }),
            2);  // one request per structure
  // The counting calibrator's partition is 3x its nodes' formula + 1 us, the kernels it
  // replaced 3x + 1 us each: 1 us less per partition of two nodes.
  EXPECT_NEAR(step->prediction.step_seconds, step->optimized.prediction.step_seconds - 2e-6, 1e-9);
  // The peak counts what each call allocates while it runs: at the first call %x and %w
  // (2 x 256 KiB) are live and the call holds its 768 KiB; the ATen plan's peak was 3 x 256 KiB.
  EXPECT_EQ(step->optimized.prediction.peak_bytes, 3 * 262144);
  EXPECT_EQ(step->prediction.peak_bytes, 2 * 262144 + CountingCalibrator::kCallWorkingBytes);
  absl::StatusOr<SimulationResult> replayed =
      Simulate(step->graph(), CostModel(*LoadDeviceProfile("cpu"), step->calibration.get()));
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  EXPECT_EQ(replayed->peak_bytes, step->prediction.peak_bytes);
  const std::string& note = step->notes.back();
  EXPECT_NE(note.find("predicted step with the compiled partitions"), std::string::npos) << note;
  EXPECT_NE(note.find("2 of 2 distinct partitions timed as compiled"), std::string::npos) << note;
  EXPECT_NE(note.find("(2 of 2 partitions' memory measured)"), std::string::npos) << note;
  CalibrationCache cache = CalibrationCache::Open(dir, "test device, libtorch 0.0");
  for (const std::string& key : call_keys) {
    EXPECT_TRUE(cache.table().Find(key + " on pointwise-test code A").has_value()) << key;
    EXPECT_EQ(cache.table().FindWorkingBytes(key + " on pointwise-test code A"), CountingCalibrator::kCallWorkingBytes)
        << key;
  }

  auto again = std::make_shared<CountingCalibrator>();
  step = compile("A", again);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_TRUE(again->measured.empty());
  EXPECT_NEAR(step->prediction.step_seconds, step->optimized.prediction.step_seconds - 2e-6, 1e-9);
  EXPECT_EQ(step->prediction.peak_bytes, 2 * 262144 + CountingCalibrator::kCallWorkingBytes);  // from the cache

  auto recompiled = std::make_shared<CountingCalibrator>();
  step = compile("B", recompiled);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(std::set<std::string>(recompiled->measured.begin(), recompiled->measured.end()), call_keys);
}

}  // namespace
}  // namespace magi
