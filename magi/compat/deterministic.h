// LibTorch's deterministic-algorithm switches across versions (1.13 and 2.x), for
// deterministic mode (magi/runtime/deterministic sets them; backends check them).
//
//   compat::SetDeterministicAlgorithms(true);   // torch.use_deterministic_algorithms(True)
//   if (!compat::DeterministicAlgorithmsEnabled()) ...
//
// What differs: at::Context::setDeterministicAlgorithms(bool, bool warn_only) is the
// same on 1.13 and 2.x; 2.x adds setDeterministicMkldnn (oneDNN CPU kernels) and, from
// 2.1, setDeterministicFillUninitializedMemory (empty tensors are filled with NaN or the
// integer maximum while deterministic algorithms are on). Both are found by detecting
// the member, not by version number, so a LibTorch that has them uses them.
#ifndef MAGI_COMPAT_DETERMINISTIC_H_
#define MAGI_COMPAT_DETERMINISTIC_H_

#include <string>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace magi::compat {

// Turns ATen's deterministic algorithms on or off, erroring (not warning) when an op
// has no deterministic kernel; also cuDNN's deterministic flag (and benchmark mode, the
// autotuner, the other way), and oneDNN's where LibTorch has it.
// LibTorch's own filling of uninitialized memory (2.1+: every tensor ATen allocates,
// filled with NaN while deterministic algorithms are on) is turned OFF: it fills every
// op's output before the op overwrites it (on the 953M step on one H200: 544 fill
// kernels, 5.0 ms of a 138 ms deterministic step, docs/benchmarks.md). The one way a
// Magi step can read memory nobody wrote is an op whose traits say `uninitialized`
// (aten::empty and its kin); the executors fill those results with
// FillUninitialized while deterministic algorithms are on. `fill_every_allocation`
// keeps LibTorch's fill on instead (slower: a check that nothing in a step reads memory
// nobody wrote, e.g. inside a kernel or an AOTInductor partition: a run with it and one
// without must agree bit for bit; MAGI_FILL_UNINITIALIZED=all, magi/runtime/deterministic).
void SetDeterministicAlgorithms(bool on, bool fill_every_allocation = false);

// Fills `tensor` as LibTorch's deterministic mode fills uninitialized memory: NaN for
// floating and complex dtypes, the largest value for integers (all bits set for the
// unsigned ones), true for bool; quantized tensors are left as they are (LibTorch does
// not fill them either). May throw c10::Error (an unsigned dtype without bitwise_not).
void FillUninitialized(at::Tensor& tensor);

// Whether ATen's deterministic algorithms are on (in any mode): executors then fill the
// results of `uninitialized` ops (above).
bool DeterministicAlgorithmsOn();

// True when deterministic algorithms are on as SetDeterministicAlgorithms(true) sets them
// (error mode, cuDNN deterministic, cuDNN benchmarking off).
bool DeterministicAlgorithmsEnabled();

// What is on, for the settings line: "aten deterministic (errors), cudnn deterministic,
// no cudnn benchmark[, mkldnn deterministic][, fill uninitialized memory]".
std::string DescribeDeterministicAlgorithms();

// OK when DeterministicAlgorithmsEnabled(); else FailedPrecondition for a backend asked
// to compile a deterministic step (CompileContext::deterministic) in a process where
// nobody turned them on.
absl::Status CheckDeterministicAlgorithms(absl::string_view backend);

// Turns ATen's deterministic-algorithm check off for one op call whose plain kernel the
// caller has shown to be deterministic for its arguments, and restores the previous
// setting (error or warn mode) when it goes out of scope. Why: ATen picks a kernel by the
// op, not by its arguments, e.g. aten::scatter.src on CUDA always takes its sort-based
// index_put_ path while deterministic algorithms are on (a host copy, a sort and ~10
// kernels per call, not capturable in a CUDA graph), although a scatter whose index has
// one entry along `dim` writes every target once. The switch is process-wide: an op
// another thread dispatches meanwhile (Gloo's worker allocates and clones its buffers)
// runs with the check off too; those ops have no nondeterministic kernel to guard.
class DeterministicAlgorithmsSuspended {
 public:
  DeterministicAlgorithmsSuspended();
  ~DeterministicAlgorithmsSuspended();
  DeterministicAlgorithmsSuspended(const DeterministicAlgorithmsSuspended&) = delete;
  DeterministicAlgorithmsSuspended& operator=(const DeterministicAlgorithmsSuspended&) = delete;

 private:
  bool was_on_;
  bool was_warn_only_;
};

}  // namespace magi::compat

#endif  // MAGI_COMPAT_DETERMINISTIC_H_
