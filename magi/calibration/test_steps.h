// Test support for the calibrator's tests: a step with a step's worth of kernel kinds, and
// two ranks as threads of one process whose all-gathers wait for both, as a real
// communicator's do.
#ifndef MAGI_CALIBRATION_TEST_STEPS_H_
#define MAGI_CALIBRATION_TEST_STEPS_H_

#include <ATen/ATen.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "magi/backend/kernel_calibrator.h"
#include "magi/calibration/options.h"
#include "magi/comm/communicator.h"
#include "magi/ir/graph.h"
#include "magi/ir/module.h"

namespace magi::calibration {

// A step's worth of kernel kinds: integer indices (embedding, a loss target), a strided
// operand (a transposed weight), a view, a multi-tensor collective, and an op that fails
// on any input of its types (a shape the kernel refuses).
extern const char kStep[];

// kStep as a step run can run it: without its kernel that cannot run (which would leave
// the step to micro-runs), and with one wait for the gather's two results
// (ThreadCommunicator's handle returns both at once).
std::string RunnableStep();

// Two ranks as threads: an all-gather waits for both, as a real communicator does.
class ThreadGroup {
 public:
  absl::StatusOr<std::vector<at::Tensor>> AllGather(int rank, const std::vector<at::Tensor>& inputs);
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

// Rank `rank` of a ThreadGroup (all-gathers only).
class ThreadCommunicator : public Communicator {
 public:
  ThreadCommunicator(ThreadGroup* group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return 2; }
  absl::StatusOr<std::unique_ptr<CollectiveHandle>> Start(CollectiveKind kind, std::vector<at::Tensor> inputs,
                                                          const std::string&) override;

 private:
  ThreadGroup* group_;
  int rank_;
};

// Every node of `graph` but the waits, with no known time.
std::vector<KernelRequest> Kernels(const Graph& graph);

// Runs `rank(r)` for ranks 0 and 1 at once (threads: a collective waits for both).
void OnTwoRanks(const std::function<void(int)>& rank);

// Rank `rank`'s options: `group` as its "dp" communicator, min_runs runs of each kernel.
TorchKernelCalibratorOptions RankOptions(ThreadGroup& group, int rank);

// The index of the first all-gather start among `requests`.
size_t FirstGather(const std::vector<KernelRequest>& requests);

// A step that calls one partition (an embedding and a relu: 2 KiB each) on `device`
// ("" or "@cuda:0").
absl::StatusOr<std::unique_ptr<Module>> PartitionCallStep(absl::string_view device);

}  // namespace magi::calibration

#endif  // MAGI_CALIBRATION_TEST_STEPS_H_
