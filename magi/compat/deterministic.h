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

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace magi::compat {

// Turns ATen's deterministic algorithms on or off, erroring (not warning) when an op
// has no deterministic kernel; also cuDNN's deterministic flag (and benchmark mode, the
// autotuner, the other way), and oneDNN's where LibTorch has it. Filling uninitialized
// memory stays at LibTorch's default (on in 2.1+): a kernel reading memory it never
// wrote then reads the same bits every run.
void SetDeterministicAlgorithms(bool on);

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

}  // namespace magi::compat

#endif  // MAGI_COMPAT_DETERMINISTIC_H_
