// What the compile driver asks a backend for when the cost model has no measured time
// for a kernel: short micro-runs of the kernels themselves (calibration by default).
//
// The compiler (magi/compiler, no LibTorch) hands over one representative node per
// distinct CalibrationTable key of the step and what its cache already knows; the
// calibrator (a backend-side implementation, e.g. magi/calibration/
// torch_kernel_calibrator.h, which calls each op as the interpreter does, on inputs of the
// node's operand types) measures the rest and returns one time per node. It does NOT
// cache or decide what to measure beyond `known`: magi/compiler/auto_calibration.h does.
//
// Distributed steps: every rank compiles the same (identically shaped) graph and calls
// Calibrate with the same requests in the same order, so an implementation may measure
// collectives in lockstep through its communicators; it must return the SAME times on
// every rank (the ranks' plans are chosen with them and must be identical: deterministic
// mode checks the plan hash across ranks), e.g. by exchanging the measurements.
//
//   class MyCalibrator : public KernelCalibrator {
//     std::string DeviceKey() const override { return "cpu <model>, 1 thread, libtorch 1.13.1"; }
//     absl::StatusOr<std::vector<KernelTime>> Calibrate(const std::vector<KernelRequest>& requests) override;
//   };
#ifndef MAGI_BACKEND_KERNEL_CALIBRATOR_H_
#define MAGI_BACKEND_KERNEL_CALIBRATOR_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/backend/backend.h"
#include "magi/ir/graph.h"

namespace magi {

// For a collective: what surrounds one place where the step issues it.
struct CollectiveIssue {
  // The compute this rank runs in the step right before issuing it (since the previous
  // collective). A collective issued after compute takes longer than one issued back to
  // back: the ranks have drifted apart and, on shared cores, the threads that run it wake
  // up later. It is measured after as much compute.
  double compute_before_seconds = 0;
  // The compute the step runs between its start and its wait (a prefetched or bucketed
  // schedule overlaps the two). On CPU that compute and the communicator's threads share
  // the cores, and the collective takes longer than alone (about 2x on 2 cores,
  // docs/passes.md): it is measured with that much compute running.
  double compute_during_seconds = 0;
};

// One kernel to time: a compute node or a collective start of a graph of the module
// being compiled (never a wait), or a partition call with its compiled partition.
struct KernelRequest {
  const Node* node = nullptr;
  // A time measured earlier on this machine (the cache), if any.
  std::optional<double> known;
  // For a collective: every place the step issues this key, in step order (none: one
  // issue with no compute around it). The key has one time in the table, which the
  // simulator charges at each issue, so it is the mean over them: a layer's all-gather
  // issued after a layer's forward takes longer than the same one right after another
  // collective (the tiny step's took 1.8 ms in its steps and 1.1 measured after the median
  // issue's compute alone).
  std::vector<CollectiveIssue> issues;
  // For a magi::call node: the compiled partition it runs (after the compile driver's
  // partition backends compiled it). The calibrator runs it by itself on inputs of the
  // call's operand types, as it runs a kernel; it also measures the memory a run allocates
  // beyond its inputs (KernelTime::working_bytes). Null otherwise.
  std::shared_ptr<Executable> callee;
  // For a call whose time is `known`: its working bytes as measured with it (the cache).
  std::optional<int64_t> known_working_bytes;
};

// The time of one kernel as every rank agrees on it.
struct KernelTime {
  std::optional<double> seconds;  // none: neither known nor measurable (the formula stays)
  bool measured = false;          // measured by this call (so worth caching), not taken from `known`
  int64_t runs = 0;               // micro-runs the time is the mean of (when measured)
  // Partition calls: the most memory one run allocates beyond its inputs, its results
  // included (the largest any rank saw); none when it could not be measured. On CUDA it
  // is the caching allocator's peak over the run, so measuring resets the allocator's
  // peak statistics (torch.cuda.reset_peak_memory_stats).
  std::optional<int64_t> working_bytes;
};

class KernelCalibrator {
 public:
  virtual ~KernelCalibrator() = default;

  // What the measured times hold for, exactly: the device model and the runtime version
  // (and whatever else changes kernel times, such as the host thread count). Names the
  // cache file: two processes with equal keys share measured times.
  virtual std::string DeviceKey() const = 0;

  // One KernelTime per request, the same on every rank: kernels unknown here (or on any
  // other rank) are measured, each with a few micro-runs (the start + wait of a
  // collective); the others keep a known time (agreed across ranks). A kernel that cannot
  // be run by itself (dynamic shapes, an op that fails on synthesized inputs) is returned
  // without seconds. Fails only when the ranks cannot agree (a dead peer), or when an
  // implementation that runs the whole step to time its kernels (on CPU, the interpreter's)
  // sees that run fail.
  virtual absl::StatusOr<std::vector<KernelTime>> Calibrate(const std::vector<KernelRequest>& requests) = 0;
};

}  // namespace magi

#endif  // MAGI_BACKEND_KERNEL_CALIBRATOR_H_
