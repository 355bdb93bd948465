// A kernel-level trace of what LibTorch runs (ATen ops on the host and, on CUDA, every
// kernel and copy on the device), recorded by Kineto, the profiler behind torch.profiler,
// and written as a Chrome/Perfetto trace (the format of torch.profiler's
// export_chrome_trace). tools/kernel_breakdown.py sums such a trace by kernel family.
//
//   absl::StatusOr<std::unique_ptr<compat::KernelTrace>> trace = compat::KernelTrace::Start(/*cuda=*/true);
//   ... run a step ...
//   absl::Status written = (*trace)->StopAndSave("/tmp/step.trace.json");
//
// What it does NOT do: trace other processes or threads that are not LibTorch's, or
// describe kernels inside a CUDA graph replay beyond what CUPTI reports for them (trace a
// stream-mode step to see each kernel with its launch). Kineto is a build option of
// LibTorch: PyPI's 2.x wheels have it; a LibTorch built without it (Debian's 1.13) makes
// Start fail with Unavailable saying so. The same API on 1.13 and 2.x
// (torch::autograd::profiler::{prepare,enable,disable}Profiler).
#ifndef MAGI_COMPAT_KERNEL_TRACE_H_
#define MAGI_COMPAT_KERNEL_TRACE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace magi::compat {

class KernelTrace {
 public:
  // Starts recording on this process's LibTorch (one trace at a time: FailedPrecondition
  // while another profiler is on); `cuda` adds the device's kernels, copies and runtime
  // calls to the host's ATen ops.
  static absl::StatusOr<std::unique_ptr<KernelTrace>> Start(bool cuda);

  // Stops recording (waiting for the device's records) and writes the trace to `path`
  // atomically (temp file + rename). Stops even when writing fails.
  absl::Status StopAndSave(const std::string& path);

  // Stops if still recording, discarding the records.
  ~KernelTrace();

 private:
  KernelTrace() = default;
  bool recording_ = false;
};

}  // namespace magi::compat

#endif  // MAGI_COMPAT_KERNEL_TRACE_H_
