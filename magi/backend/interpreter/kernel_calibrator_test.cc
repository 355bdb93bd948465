#include "magi/backend/interpreter/kernel_calibrator.h"

#include <condition_variable>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/version.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "magi/backend/torch_executable.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/parser.h"

namespace magi {
namespace {

// A step's worth of kernel kinds: integer indices (embedding, a loss target), a strided
// operand (a transposed weight), a view, a multi-tensor collective, and an op that fails
// on any input of its types (a shape the kernel refuses).
constexpr char kStep[] = R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %w: f32[250,64] {role = param}
    input %tokens: i64[32]
    input %targets: i64[32]
    input %lin: f32[64,64] {role = param}
    %e = aten::embedding(%w, %tokens, -1, false, false) : f32[32,64]
    %t = aten::t(%lin) : f32[64,64]strides[1,64]
    %h = aten::mm(%e, %t) : f32[32,64]
    %w2t = aten::t(%w) : f32[64,250]strides[1,64]
    %logits = aten::mm(%h, %w2t) : f32[32,250]
    %ls = aten::_log_softmax(%logits, 1, false) : f32[32,250]
    %loss, %total = aten::nll_loss_forward(%ls, %targets, none, 1, -100) : f32[], f32[]
    %f0, %f1 = magi::all_gather_start([%h, %e], group = "dp") : future<f32[64,64]>, future<f32[64,64]>
    %g0 = magi::wait(%f0) : f32[64,64]
    %g1 = magi::wait(%f1) : f32[64,64]
    %bad = aten::mm(%h, %h) : f32[32,32]
    output loss = %loss
    output g0 = %g0
    output bad = %bad
  }
}
)";

// Two ranks as threads: an all-gather waits for both, as a real communicator does.
class ThreadGroup {
 public:
  absl::StatusOr<std::vector<at::Tensor>> AllGather(int rank, const std::vector<at::Tensor>& inputs) {
    std::unique_lock<std::mutex> lock(mutex_);
    const int generation = generation_;
    deposited_[rank] = inputs;
    if (++arrived_ == 2) {
      result_.clear();
      for (size_t i = 0; i < inputs.size(); ++i) result_.push_back(at::cat({deposited_[0][i], deposited_[1][i]}));
      arrived_ = 0;
      ++generation_;
      ++collectives_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != generation; });
    }
    return result_;
  }
  int collectives() const { return collectives_; }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<at::Tensor> deposited_[2];
  std::vector<at::Tensor> result_;
  int arrived_ = 0, generation_ = 0, collectives_ = 0;
};

// A collective that finished when it started: Wait returns its results.
struct DoneHandle : CollectiveHandle {
  explicit DoneHandle(absl::StatusOr<std::vector<at::Tensor>> results) : results(std::move(results)) {}
  absl::StatusOr<std::vector<at::Tensor>> Wait() override { return results; }
  absl::StatusOr<std::vector<at::Tensor>> results;
};

class ThreadCommunicator : public Communicator {
 public:
  ThreadCommunicator(ThreadGroup* group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return 2; }
  absl::StatusOr<std::unique_ptr<CollectiveHandle>> Start(CollectiveKind kind, std::vector<at::Tensor> inputs,
                                                          const std::string&) override {
    if (kind != CollectiveKind::kAllGather) return absl::UnimplementedError("all-gather only");
    return std::unique_ptr<CollectiveHandle>(std::make_unique<DoneHandle>(group_->AllGather(rank_, inputs)));
  }

 private:
  ThreadGroup* group_;
  int rank_;
};

std::vector<KernelRequest> Kernels(const Graph& graph) {
  std::vector<KernelRequest> requests;
  for (const Node* node : graph.nodes()) {
    if (node->op() != "magi::wait") requests.push_back({node, std::nullopt});
  }
  return requests;
}

// Runs `rank(r)` for ranks 0 and 1 at once (threads: a collective waits for both).
void OnTwoRanks(const std::function<void(int)>& rank) {
  std::thread r0(rank, 0), r1(rank, 1);
  r0.join();
  r1.join();
}

// Rank `rank`'s options: `group` as its "dp" communicator, min_runs runs of each kernel.
TorchKernelCalibratorOptions RankOptions(ThreadGroup& group, int rank) {
  TorchKernelCalibratorOptions options;
  options.communicators["dp"] = std::make_shared<ThreadCommunicator>(&group, rank);
  options.seconds_per_kernel = 0.0;
  return options;
}

// kStep as a step run can run it: without its kernel that cannot run (which would leave
// the step to micro-runs), and with one wait for the gather's two results
// (ThreadCommunicator's handle returns both at once).
std::string RunnableStep() {
  std::string text = absl::StrReplaceAll(
      kStep, {{"    %bad = aten::mm(%h, %h) : f32[32,32]\n", ""},
              {"    output bad = %bad\n", ""},
              {"    %g0 = magi::wait(%f0) : f32[64,64]\n    %g1 = magi::wait(%f1) : f32[64,64]\n",
               "    %g0, %g1 = magi::wait(%f0, %f1) : f32[64,64], f32[64,64]\n"}});
  if (text.find("%bad") != std::string::npos || text.find("magi::wait(%f0, %f1)") == std::string::npos) {
    ADD_FAILURE() << "kStep changed: RunnableStep's edits no longer apply";
  }
  return text;
}

size_t FirstGather(const std::vector<KernelRequest>& requests) {
  size_t gather = 0;
  while (requests.at(gather).node->op() != "magi::all_gather_start") ++gather;
  return gather;
}

TEST(KernelCalibratorTest, TheDeviceKeyNamesTheCpuThreadsAndLibTorch) {
  std::string key = TorchDeviceKey(at::Device(at::kCPU));
  EXPECT_EQ(key.rfind("cpu ", 0), 0u) << key;
  EXPECT_NE(key.find(" thread"), std::string::npos) << key;
  EXPECT_NE(key.find(", libtorch " TORCH_VERSION), std::string::npos) << key;
}

TEST(KernelCalibratorTest, OneProcessMeasuresWhatIsNotKnownAndKeepsWhatIs) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  ASSERT_TRUE(module.ok()) << module.status();
  const Graph& graph = *(*module)->FindGraph("g");
  std::vector<KernelRequest> requests = Kernels(graph);
  requests[0].known = 0.25;  // the embedding: known, not measured again
  // No operand read into the cache before a timed run, a 1 MiB cache (the operands the step
  // wrote just before; the weights, graph inputs, are not), every produced operand.
  for (int64_t cache_bytes : {int64_t{0}, int64_t{1} << 20, int64_t{1} << 40}) {
    SCOPED_TRACE(cache_bytes);
    TorchKernelCalibratorOptions options;
    options.seconds_per_kernel = 0.0;  // min_runs each
    options.cpu_cache_bytes = cache_bytes;
    std::multiset<std::string> read_in;  // the first result of each node an operand was read in for
    options.on_cache_read_for_testing = [&](const Node& node, const at::Tensor&) {
      read_in.insert(node.result(0)->name());
    };
    std::shared_ptr<KernelCalibrator> calibrator = MakeTorchKernelCalibrator(options);
    absl::StatusOr<std::vector<KernelTime>> times = calibrator->Calibrate(requests);
    ASSERT_TRUE(times.ok()) << times.status();
    if (cache_bytes == 0) {
      EXPECT_TRUE(read_in.empty());
    } else {
      // Before each of the min_runs timed runs: e for the mm making h, h for the mm making
      // the logits, the logits for the log-softmax making ls. The embedding reads graph
      // inputs only (the weights and tokens: the previous step touched them last).
      const int runs = options.min_runs;
      EXPECT_EQ(read_in.count("logits"), runs);
      EXPECT_EQ(read_in.count("ls"), runs);
      EXPECT_EQ(read_in.count("h"), runs);
      EXPECT_EQ(read_in.count("e"), 0);
    }
    ASSERT_EQ(times->size(), requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      const std::string& op = requests[i].node->op();
      SCOPED_TRACE(requests[i].node->DebugName());
      if (i == 0) {
        EXPECT_EQ((*times)[i].seconds, 0.25);
        EXPECT_FALSE((*times)[i].measured);
      } else if (op == "magi::all_gather_start" || requests[i].node->result(0)->name() == "bad") {
        // No communicator for "dp"; mm of [32,64] x [32,64] fails: both left to the formula.
        EXPECT_FALSE((*times)[i].seconds.has_value());
        EXPECT_TRUE((*times)[i].measured);
      } else {
        ASSERT_TRUE((*times)[i].seconds.has_value());
        EXPECT_GT(*(*times)[i].seconds, 0);
        EXPECT_LT(*(*times)[i].seconds, 1.0);
        EXPECT_EQ((*times)[i].runs, options.min_runs);
        EXPECT_TRUE((*times)[i].measured);
      }
    }
  }
}

// Past max_seconds the CPU's in-order rounds stop at min_runs, and kernels not yet
// prepared are left to the formula (not measured, no time).
TEST(KernelCalibratorTest, KernelsPastTheTimeLimitAreLeftToTheFormula) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  ASSERT_TRUE(module.ok()) << module.status();
  std::vector<KernelRequest> requests = Kernels(*(*module)->FindGraph("g"));
  TorchKernelCalibratorOptions options;
  options.max_seconds = -1;  // already past
  absl::StatusOr<std::vector<KernelTime>> times = MakeTorchKernelCalibrator(options)->Calibrate(requests);
  ASSERT_TRUE(times.ok()) << times.status();
  for (const KernelTime& time : *times) EXPECT_FALSE(time.seconds.has_value());
}

// Measuring draws random inputs; the process's generator must come out as it went in, so a run
// that calibrates trains (and checkpoints) exactly as one that found its kernels cached.
TEST(KernelCalibratorTest, MeasuringLeavesTheRandomGeneratorAsItWas) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  ASSERT_TRUE(module.ok()) << module.status();
  std::vector<KernelRequest> requests = Kernels(*(*module)->FindGraph("g"));
  TorchKernelCalibratorOptions options;
  options.seconds_per_kernel = 0.0;
  at::manual_seed(7);
  at::Tensor expected = at::rand({4});
  at::manual_seed(7);
  absl::StatusOr<std::vector<KernelTime>> times = MakeTorchKernelCalibrator(options)->Calibrate(requests);
  ASSERT_TRUE(times.ok()) << times.status();
  int measured = 0;
  for (const KernelTime& time : *times) measured += time.seconds.has_value() && time.measured;
  ASSERT_GT(measured, 0);  // it did run kernels on random inputs
  EXPECT_TRUE(at::equal(at::rand({4}), expected));
}

// A step with an rng.state input (a captured step that draws random numbers) runs for
// its kernels' times with the generator's own state as that input, and the generator comes
// out as it went in.
TEST(KernelCalibratorTest, AStepWithAnRngInputRunsAndLeavesTheGeneratorAsItWas) {
  const int64_t state_bytes = at::detail::getDefaultCPUGenerator().get_state().numel();
  const std::string text = absl::StrCat("module @m {\n  graph @g {\n    input %rng: u8[", state_bytes,
                                        "] {role = rng}\n", R"(    input %x: f32[64]
    %r = aten::bernoulli.p(%x, 0.5) : f32[64]
    %y = aten::mul.Tensor(%r, %x) : f32[64]
    output y = %y
  }
}
)");
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(text);
  ASSERT_TRUE(module.ok()) << module.status();
  std::vector<KernelRequest> requests = Kernels(*(*module)->FindGraph("g"));
  ASSERT_EQ(requests.size(), 2u);
  TorchKernelCalibratorOptions options;
  options.seconds_per_kernel = 0.0;
  options.max_step_runs = 4;
  options.seconds_for_step_runs = 60;  // far more than 4 runs take
  at::manual_seed(7);
  at::Tensor expected = at::rand({4});
  at::manual_seed(7);
  absl::StatusOr<std::vector<KernelTime>> times = MakeTorchKernelCalibrator(options)->Calibrate(requests);
  ASSERT_TRUE(times.ok()) << times.status();
  for (const KernelTime& time : *times) {
    ASSERT_TRUE(time.seconds.has_value());
    EXPECT_EQ(time.runs, 4);  // the step's runs, not min_runs micro-runs
  }
  EXPECT_TRUE(at::equal(at::rand({4}), expected));
}

TEST(KernelCalibratorTest, RanksMeasureInLockstepAndReturnTheSameTimes) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  ASSERT_TRUE(module.ok()) << module.status();
  const Graph& graph = *(*module)->FindGraph("g");
  const std::vector<KernelRequest> requests = Kernels(graph);
  const size_t gather = FirstGather(requests);
  ThreadGroup group;
  absl::StatusOr<std::vector<KernelTime>> times[2];
  auto rank = [&](int r) {
    TorchKernelCalibratorOptions options = RankOptions(group, r);
    std::vector<KernelRequest> mine = requests;
    // The embedding is cached on both ranks (with different times: other machines); the
    // mm only on rank 0: both measure it.
    mine[0].known = r == 0 ? 0.25 : 0.75;
    if (r == 0) mine[2].known = 0.5;
    // The gather follows 10 ms of compute in the step: each run does that much first; and
    // the step overlaps it with 10 ms more: each run does that between its start and wait.
    mine[gather].issues = {{/*compute_before_seconds=*/0.01, /*compute_during_seconds=*/0.01}};
    options.max_collective_runs = options.collective_runs;  // no runs beyond the 18
    options.time_in_step_runs = false;  // micro-runs (%bad keeps this step from running anyway)
    times[r] = MakeTorchKernelCalibrator(options)->Calibrate(mine);
  };
  OnTwoRanks(rank);
  ASSERT_TRUE(times[0].ok()) << times[0].status();
  ASSERT_TRUE(times[1].ok()) << times[1].status();
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(requests[i].node->DebugName());
    EXPECT_EQ((*times[0])[i].seconds, (*times[1])[i].seconds);  // bit for bit
    EXPECT_EQ((*times[0])[i].measured, (*times[1])[i].measured);
  }
  EXPECT_EQ((*times[0])[0].seconds, 0.5);  // the mean of the ranks' cached times
  EXPECT_FALSE((*times[0])[0].measured);
  EXPECT_TRUE((*times[0])[2].measured);  // missing on rank 1
  EXPECT_NE((*times[0])[2].seconds, 0.5);
  ASSERT_TRUE((*times[0])[gather].seconds.has_value());
  // The compute it overlaps counts (this communicator reports no timing: to the wait's
  // end). That compute is 10 ms as the probe guessed its rate; under load the guess runs
  // short (3.4 ms once), while a thread handshake alone takes ~0.1 ms.
  EXPECT_GT(*(*times[0])[gather].seconds, 0.002);
  const int runs = TorchKernelCalibratorOptions().collective_runs;
  EXPECT_EQ(runs, 18);
  EXPECT_EQ((*times[0])[gather].runs, 2 * runs);  // the timed runs on each rank
  // The request check, agreement (missing kernels, then the times), the ranks' time per
  // unit of compute work, one warm-up and the timed runs of the gather (the compute beside
  // it adds none).
  EXPECT_EQ(group.collectives(), 1 + 2 + 1 + 1 + runs);
}

// On CPU the kernels and collectives of a graph that can run on synthesized inputs are
// timed in runs of that graph, as many on both ranks; the times agree as micro-run times do.
TEST(KernelCalibratorTest, CollectivesOnCpuAreTimedInRunsOfTheirStep) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(RunnableStep());
  ASSERT_TRUE(module.ok()) << module.status();
  const Graph& graph = *(*module)->FindGraph("g");
  const std::vector<KernelRequest> requests = Kernels(graph);
  const size_t gather = FirstGather(requests);
  ThreadGroup group;
  absl::StatusOr<std::vector<KernelTime>> times[2];
  auto rank = [&](int r) {
    TorchKernelCalibratorOptions options = RankOptions(group, r);
    options.step_warmup_runs = 1;
    options.max_step_runs = 5;
    options.seconds_for_step_runs = 60;  // far more than 5 runs take
    times[r] = MakeTorchKernelCalibrator(options)->Calibrate(requests);
  };
  OnTwoRanks(rank);
  ASSERT_TRUE(times[0].ok()) << times[0].status();
  ASSERT_TRUE(times[1].ok()) << times[1].status();
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(requests[i].node->DebugName());
    EXPECT_EQ((*times[0])[i].seconds, (*times[1])[i].seconds);  // bit for bit
    ASSERT_TRUE((*times[0])[i].seconds.has_value());
    EXPECT_GT(*(*times[0])[i].seconds, 0);
  }
  EXPECT_EQ((*times[0])[gather].runs, 2 * 5);  // one issue a run, 5 runs counted on each rank
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].node->result(0)->name() == "h") {
      EXPECT_EQ((*times[0])[i].runs, 2 * 5);  // not min_runs
    }
  }
  // The request check, agreement (missing kernels, then the times), whether all can run
  // the step, its one gather in the warm-up run, the ranks' pace, the gather in the 5
  // counted runs: no micro-run of it.
  EXPECT_EQ(group.collectives(), 1 + 2 + 1 + 1 + 1 + 5);
}

// A graph whose run would hold more than max_step_run_bytes at its peak on some rank is
// run by no rank: its kernels and collectives keep their micro-run times, on both ranks.
TEST(KernelCalibratorTest, AStepAboveTheStepRunMemoryLimitKeepsItsMicroRunTimes) {
  // The step CollectivesOnCpuAreTimedInRunsOfTheirStep runs (below the limit this one would).
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(RunnableStep());
  ASSERT_TRUE(module.ok()) << module.status();
  const std::vector<KernelRequest> requests = Kernels(*(*module)->FindGraph("g"));
  const size_t gather = FirstGather(requests);
  ThreadGroup group;
  absl::StatusOr<std::vector<KernelTime>> times[2];
  auto rank = [&](int r) {
    TorchKernelCalibratorOptions options = RankOptions(group, r);
    // Rank 0's limit is below what the inputs alone hold (about 81 KB); rank 1 has the
    // default (half the host's available memory): neither runs the step.
    if (r == 0) options.max_step_run_bytes = 1024;
    options.collective_runs = 4;
    options.max_collective_runs = 4;
    times[r] = MakeTorchKernelCalibrator(options)->Calibrate(requests);
  };
  OnTwoRanks(rank);
  ASSERT_TRUE(times[0].ok()) << times[0].status();
  ASSERT_TRUE(times[1].ok()) << times[1].status();
  ASSERT_TRUE((*times[0])[gather].seconds.has_value());
  EXPECT_EQ((*times[0])[gather].runs, 2 * 4);  // micro-runs: one issue, 4 runs on each rank
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(requests[i].node->DebugName());
    EXPECT_EQ((*times[0])[i].seconds, (*times[1])[i].seconds);
    if (requests[i].node->result(0)->name() == "h") {
      EXPECT_EQ((*times[0])[i].runs, 2 * 3);  // min_runs micro-runs, not step runs
    }
  }
}

// A kernel that cannot run on synthesized inputs keeps its step from running in later
// calls too (the compile driver asks about a step's kernels, then its collectives): the
// collectives are then micro-run, on both ranks, and nothing fails.
TEST(KernelCalibratorTest, AKernelThatCannotRunLeavesTheCollectivesOfLaterCallsToMicroRuns) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  ASSERT_TRUE(module.ok()) << module.status();
  const std::vector<KernelRequest> requests = Kernels(*(*module)->FindGraph("g"));
  std::vector<KernelRequest> compute, collectives;
  for (const KernelRequest& request : requests) {
    (request.node->op() == "magi::all_gather_start" ? collectives : compute).push_back(request);
  }
  ASSERT_EQ(collectives.size(), 1u);
  ThreadGroup group;
  absl::StatusOr<std::vector<KernelTime>> first[2], second[2];
  auto rank = [&](int r) {
    TorchKernelCalibratorOptions options = RankOptions(group, r);
    options.collective_runs = 4;
    options.max_collective_runs = 4;
    std::shared_ptr<KernelCalibrator> calibrator = MakeTorchKernelCalibrator(options);
    first[r] = calibrator->Calibrate(compute);  // %bad fails its micro-run here
    second[r] = calibrator->Calibrate(collectives);
  };
  OnTwoRanks(rank);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(first[r].ok()) << first[r].status();
    ASSERT_TRUE(second[r].ok()) << second[r].status();
  }
  ASSERT_TRUE((*second[0])[0].seconds.has_value());
  EXPECT_EQ((*second[0])[0].runs, 2 * 4);  // micro-runs
  // First call: the request check, the missing kernels, whether all can run the step (no:
  // %bad), the times. Second: the check, the missing kernels, one warm-up and 4 runs of
  // the gather, the times.
  EXPECT_EQ(group.collectives(), (1 + 1 + 1 + 1) + (1 + 1 + 1 + 4 + 1));
}

// kStep's all-gather micro-run on two ranks with `issues` (collective_runs runs, then up
// to 12 as seconds_per_collective allows): each rank's times and how many collectives the
// ranks ran.
struct GatherRuns {
  absl::StatusOr<std::vector<KernelTime>> times[2];
  int collectives = 0;
};
GatherRuns MicroRunTheGather(const std::vector<CollectiveIssue>& issues, int collective_runs,
                             double seconds_per_collective) {
  GatherRuns result;
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  if (!module.ok()) {
    result.times[0] = result.times[1] = module.status();
    return result;
  }
  std::vector<KernelRequest> requests;
  for (const Node* node : (*module)->FindGraph("g")->nodes()) {
    if (node->op() == "magi::all_gather_start") requests.push_back({node, std::nullopt, issues});
  }
  ThreadGroup group;
  OnTwoRanks([&](int r) {
    TorchKernelCalibratorOptions options = RankOptions(group, r);
    options.time_in_step_runs = false;  // micro-runs (a run of kStep would fail on %bad)
    options.collective_runs = collective_runs;
    options.max_collective_runs = 12;
    options.seconds_per_collective = seconds_per_collective;
    result.times[r] = MakeTorchKernelCalibrator(options)->Calibrate(requests);
  });
  result.collectives = group.collectives();
  return result;
}

// On CPU a fast collective runs more than collective_runs times, as many as its budget
// allows at the slowest rank's pace (up to max_collective_runs): the same count on both
// ranks, or the second would wait for a gather the first never starts. A key the step
// issues at two places is timed at each in turn, and its time is their mean.
TEST(KernelCalibratorTest, FastCollectivesOnCpuRunMoreTimesInLockstep) {
  // Alone, then overlapping 20 ms of compute (this communicator reports no timing: the
  // run lasts to the wait's end); far more time than 12 runs take.
  GatherRuns runs = MicroRunTheGather({{0.0, 0.0}, {0.0, 0.02}}, /*collective_runs=*/4, /*seconds_per_collective=*/60);
  ASSERT_TRUE(runs.times[0].ok()) << runs.times[0].status();
  ASSERT_TRUE(runs.times[1].ok()) << runs.times[1].status();
  ASSERT_EQ(runs.times[0]->size(), 1u);
  EXPECT_EQ((*runs.times[0])[0].runs, 2 * 12);
  EXPECT_EQ((*runs.times[0])[0].seconds, (*runs.times[1])[0].seconds);
  ASSERT_TRUE((*runs.times[0])[0].seconds.has_value());
  // Half the weight is the overlapped issue's (about 20 ms of compute, as the probe
  // guessed it; 12 ms in one run): alone, a thread handshake takes ~0.1 ms.
  EXPECT_GT(*(*runs.times[0])[0].seconds, 0.002);
  // The request check, agreement, the ranks' time per unit of compute, one warm-up, 4
  // runs, the pace, 8 runs more.
  EXPECT_EQ(runs.collectives, 1 + 2 + 1 + 1 + 4 + 1 + 8);
}

// With no time for more runs, a collective on CPU still runs once per issue group, even
// where that is more than collective_runs: the extension's lower clamp, on both ranks.
TEST(KernelCalibratorTest, CollectivesWithoutTimeForMoreRunOncePerIssueGroup) {
  // Two issue groups, one run asked for: the extension (at run 1) must keep the second.
  GatherRuns runs = MicroRunTheGather({{0.0, 0.0}, {0.0, 0.001}}, /*collective_runs=*/1, /*seconds_per_collective=*/0);
  ASSERT_TRUE(runs.times[0].ok()) << runs.times[0].status();
  ASSERT_TRUE(runs.times[1].ok()) << runs.times[1].status();
  ASSERT_EQ(runs.times[0]->size(), 1u);
  EXPECT_EQ((*runs.times[0])[0].runs, 2 * 2);
  EXPECT_EQ((*runs.times[0])[0].seconds, (*runs.times[1])[0].seconds);
  // The request check, agreement, the ranks' time per unit of compute, one warm-up, run
  // 1, the pace (which allows none more), run 2, the times.
  EXPECT_EQ(runs.collectives, 1 + 2 + 1 + 1 + 1 + 1 + 1);
}

TEST(KernelCalibratorTest, RanksThatAskForDifferentKernelsMeasureNothingAndDoNotHang) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  ASSERT_TRUE(module.ok()) << module.status();
  const std::vector<KernelRequest> requests = Kernels(*(*module)->FindGraph("g"));
  ThreadGroup group;
  absl::StatusOr<std::vector<KernelTime>> times[2];
  auto rank = [&](int r) {
    TorchKernelCalibratorOptions options = RankOptions(group, r);
    // Rank 1 lacks the last kernel (as if it compiled another graph).
    std::vector<KernelRequest> mine(requests.begin(), requests.end() - (r == 1 ? 1 : 0));
    times[r] = MakeTorchKernelCalibrator(options)->Calibrate(mine);
  };
  OnTwoRanks(rank);
  ASSERT_TRUE(times[0].ok()) << times[0].status();
  ASSERT_TRUE(times[1].ok()) << times[1].status();
  EXPECT_EQ(times[0]->size(), requests.size());
  EXPECT_EQ(times[1]->size(), requests.size() - 1);
  for (const auto& ranks : times) {
    for (const KernelTime& time : *ranks) EXPECT_FALSE(time.seconds.has_value());
  }
  EXPECT_EQ(group.collectives(), 1);  // the check alone
}

// The same kernels issued differently (rank 1 sees compute before the gather, rank 0 none)
// would take different exchanges (the compute probe), so they count as different requests.
TEST(KernelCalibratorTest, RanksWhoseCollectivesAreIssuedDifferentlyMeasureNothingAndDoNotHang) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  ASSERT_TRUE(module.ok()) << module.status();
  const std::vector<KernelRequest> requests = Kernels(*(*module)->FindGraph("g"));
  const size_t gather = FirstGather(requests);
  ThreadGroup group;
  absl::StatusOr<std::vector<KernelTime>> times[2];
  auto rank = [&](int r) {
    TorchKernelCalibratorOptions options = RankOptions(group, r);
    std::vector<KernelRequest> mine = requests;
    mine[gather].issues = {{r == 1 ? 0.01 : 0.0, 0.0}};
    times[r] = MakeTorchKernelCalibrator(options)->Calibrate(mine);
  };
  OnTwoRanks(rank);
  ASSERT_TRUE(times[0].ok()) << times[0].status();
  ASSERT_TRUE(times[1].ok()) << times[1].status();
  for (const auto& ranks : times) {
    for (const KernelTime& time : *ranks) EXPECT_FALSE(time.seconds.has_value());
  }
  EXPECT_EQ(group.collectives(), 1);  // the check alone
}

// A partition call (KernelRequest::callee) runs its compiled partition by itself: an
// interpreter-compiled TorchExecutable is timed; an executable that runs no LibTorch tensors
// (and a call without one) is left to the formula.
class OpaqueExecutable : public Executable {
 public:
  absl::string_view backend_name() const override { return "opaque"; }
};

// A step that calls one partition (an embedding and a relu: 2 KiB each) on `device`
// ("" or "@cuda:0").
absl::StatusOr<std::unique_ptr<Module>> PartitionCallStep(absl::string_view device) {
  return ParseModule(absl::StrReplaceAll(R"(module @m {
  graph @step.p.0 {
    input %x: f32[64,64]DEV
    input %ids: i64[8]DEV
    %e = aten::embedding(%x, %ids, -1, false, false) : f32[8,64]DEV
    %r = aten::relu(%e) : f32[8,64]DEV
    output r = %r
  }
  graph @step {
    input %a: f32[64,64]DEV
    input %i: i64[8]DEV
    %c = magi::call([%a, %i], callee = "step.p.0") : f32[8,64]DEV
    output c = %c
  }
}
)",
                                         {{"DEV", device}}));
}

TEST(KernelCalibratorTest, PartitionCallsRunTheirCompiledPartition) {
  absl::StatusOr<std::unique_ptr<Module>> module = PartitionCallStep("");
  ASSERT_TRUE(module.ok()) << module.status();
  const Node& call = *(*module)->FindGraph("step")->FindValue("c")->producer();
  absl::StatusOr<std::unique_ptr<TorchExecutable>> partition = CompileForTorch("interpreter", **module, "step.p.0");
  ASSERT_TRUE(partition.ok()) << partition.status();
  std::vector<KernelRequest> requests(4);
  for (KernelRequest& request : requests) request.node = &call;
  requests[0].callee = std::shared_ptr<Executable>(std::move(*partition));
  requests[1].callee = std::make_shared<OpaqueExecutable>();
  requests[3].callee = requests[0].callee;  // measured before (the cache): kept, memory included
  requests[3].known = 1e-3;
  requests[3].known_working_bytes = 77;
  TorchKernelCalibratorOptions options;
  options.seconds_per_kernel = 0.0;
  absl::StatusOr<std::vector<KernelTime>> times = MakeTorchKernelCalibrator(options)->Calibrate(requests);
  ASSERT_TRUE(times.ok()) << times.status();
  ASSERT_EQ(times->size(), 4u);
  ASSERT_TRUE((*times)[0].seconds.has_value());
  EXPECT_GT(*(*times)[0].seconds, 0);
  EXPECT_EQ((*times)[0].runs, options.min_runs);
  // While it runs the partition holds %e and %r (2 KiB each) beyond its inputs.
  EXPECT_EQ((*times)[0].working_bytes, 2 * 2048);
  EXPECT_FALSE((*times)[1].seconds.has_value());  // "backend 'opaque' does not run LibTorch tensors"
  EXPECT_FALSE((*times)[1].working_bytes.has_value());
  EXPECT_FALSE((*times)[2].seconds.has_value());  // a call node without its partition: not a kernel
  EXPECT_EQ((*times)[3].seconds, 1e-3);
  EXPECT_FALSE((*times)[3].measured);
  EXPECT_EQ((*times)[3].working_bytes, 77);
}

// On CUDA a partition's memory is the caching allocator's peak over one run (whatever
// code allocates it), measured the same: %e and %r, 2 KiB each (multiples of the
// allocator's 512-byte rounding). Runs where a GPU is (the GPU machine's --config=cuda).
TEST(KernelCalibratorTest, PartitionCallsOnCudaMeasureTheAllocatorsPeak) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  absl::StatusOr<std::unique_ptr<Module>> module = PartitionCallStep("@cuda:0");
  ASSERT_TRUE(module.ok()) << module.status();
  const Node& call = *(*module)->FindGraph("step")->FindValue("c")->producer();
  absl::StatusOr<std::unique_ptr<TorchExecutable>> partition = CompileForTorch("interpreter", **module, "step.p.0");
  ASSERT_TRUE(partition.ok()) << partition.status();
  std::vector<KernelRequest> requests(1);
  requests[0].node = &call;
  requests[0].callee = std::shared_ptr<Executable>(std::move(*partition));
  TorchKernelCalibratorOptions options;
  options.device = at::Device(at::kCUDA, 0);
  options.seconds_per_kernel = 0.0;
  absl::StatusOr<std::vector<KernelTime>> times = MakeTorchKernelCalibrator(options)->Calibrate(requests);
  ASSERT_TRUE(times.ok()) << times.status();
  ASSERT_TRUE((*times)[0].seconds.has_value());
  EXPECT_EQ((*times)[0].working_bytes, 2 * 2048);
}

// A group of one rank: an all-gather returns its inputs.
class OneRankCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  absl::StatusOr<std::unique_ptr<CollectiveHandle>> Start(CollectiveKind kind, std::vector<at::Tensor> inputs,
                                                          const std::string&) override {
    if (kind != CollectiveKind::kAllGather) return absl::UnimplementedError("all-gather only");
    return std::unique_ptr<CollectiveHandle>(std::make_unique<DoneHandle>(std::move(inputs)));
  }
};

// On CUDA nccl_stream skips a collective over one rank, so the calibrator leaves it to the
// formula without announcing a measurement: a compile from a cached table says nothing.
TEST(KernelCalibratorTest, OneRankCollectivesOnCudaAreLeftToTheFormulaUnannounced) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  ASSERT_TRUE(module.ok()) << module.status();
  std::vector<KernelRequest> requests;
  for (const Node* node : (*module)->FindGraph("g")->nodes()) {
    if (node->op() == "magi::all_gather_start") requests.push_back({node, std::nullopt});
  }
  ASSERT_EQ(requests.size(), 1u);
  auto communicator = std::make_shared<OneRankCommunicator>();
  TorchKernelCalibratorOptions options;
  options.device = at::Device(at::kCUDA, 0);
  options.communicators["dp"] = communicator;
  options.progress = true;
  testing::internal::CaptureStderr();
  absl::StatusOr<std::vector<KernelTime>> times = MakeTorchKernelCalibrator(options)->Calibrate(requests);
  const std::string said = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(times.ok()) << times.status();
  EXPECT_FALSE((*times)[0].seconds.has_value());
  EXPECT_EQ(said.find("calibrat"), std::string::npos) << said;
}

}  // namespace
}  // namespace magi
