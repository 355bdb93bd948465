// The interpreter's profiled node times of a timed collective (RunStats::node_seconds):
// the collective's duration as the communicator timed it sits on its start, 0 on its wait,
// and the time the interpreter's own thread spent in the two nodes outside the wait's
// blocking (issuing it, taking its results) stays on the start: the step paid it.
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>

#include "gtest/gtest.h"
#include "magi/backend/torch_executable.h"
#include "magi/comm/communicator.h"
#include "magi/ir/parser.h"

namespace magi {
namespace {

using Clock = std::chrono::steady_clock;

// One rank. Start spends `issue` before the collective can start (as work a communicator
// does before it marks a collective issued would); the collective then takes `duration`,
// and the wait blocks until it is done.
class SlowCommunicator : public Communicator {
 public:
  SlowCommunicator(std::chrono::milliseconds issue, std::chrono::milliseconds duration)
      : issue_(issue), duration_(duration) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  absl::StatusOr<std::unique_ptr<CollectiveHandle>> Start(CollectiveKind, std::vector<at::Tensor> inputs,
                                                          const std::string&) override {
    std::this_thread::sleep_for(issue_);
    struct Handle : CollectiveHandle {
      std::vector<at::Tensor> results;
      CollectiveTiming times;
      absl::StatusOr<std::vector<at::Tensor>> Wait() override {
        std::this_thread::sleep_until(times.done);
        return results;
      }
      std::optional<CollectiveTiming> timing() const override { return times; }
    };
    auto handle = std::make_unique<Handle>();
    handle->results = std::move(inputs);
    handle->times.ready = Clock::now();
    handle->times.done = handle->times.ready + duration_;
    return std::unique_ptr<CollectiveHandle>(std::move(handle));
  }

 private:
  std::chrono::milliseconds issue_, duration_;
};

TEST(InterpreterProfileTest, ATimedCollectiveKeepsTheThreadsOwnTimeOnItsStart) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(R"(module @m {
  process_group @dp {axis = "dp", size = 1}
  graph @g {
    input %x: f32[8]
    %f = magi::all_reduce_start([%x], group = "dp", reduce_op = "sum") : future<f32[8]>
    %w = magi::wait(%f) : f32[8]
    %y = aten::neg(%w) : f32[8]
    output y = %y
  }
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  absl::StatusOr<std::unique_ptr<TorchExecutable>> executable = CompileForTorch("interpreter", **module, "g");
  ASSERT_TRUE(executable.ok()) << executable.status();
  ASSERT_TRUE((*executable)
                  ->BindCommunicator("dp", std::make_shared<SlowCommunicator>(std::chrono::milliseconds(30),
                                                                              std::chrono::milliseconds(40)))
                  .ok());
  (*executable)->set_profile_nodes(true);
  absl::StatusOr<std::vector<at::Tensor>> outputs = (*executable)->Run({at::ones({8})});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  const RunStats& stats = (*executable)->last_run_stats();
  ASSERT_EQ(stats.node_seconds.size(), 3u);
  EXPECT_EQ(stats.node_seconds[1], 0.0) << "the wait";
  // 30 ms issuing (before the communicator's `ready`) + 40 ms the collective ran.
  EXPECT_GE(stats.node_seconds[0], 0.070);
  double sum = 0;
  for (double seconds : stats.node_seconds) sum += seconds;
  EXPECT_LE(sum, stats.seconds) << "nothing counted twice";
}

}  // namespace
}  // namespace magi
