#include "magi/compat/kernel_trace.h"

#include <stdio.h>
#include <torch/csrc/api/include/torch/version.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/profiler/orchestration/observer.h>
#include <unistd.h>

#include <set>

#include "absl/strings/str_cat.h"

namespace magi::compat {
namespace {

using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

std::string Message(const c10::Error& error) { return error.what_without_backtrace(); }

// Whether this LibTorch can write a trace: a LibTorch built without Kineto records (the
// profiler falls back to its own host events) but refuses to save, so an empty recording
// is saved once, to /dev/null, before a real one starts. Checked once per process.
absl::Status KinetoSaves() {
  static const absl::Status* status = [] {
    std::set<ActivityType> activities = {ActivityType::CPU};
    ProfilerConfig config(ProfilerState::KINETO);
    try {
      torch::autograd::profiler::prepareProfiler(config, activities);
      torch::autograd::profiler::enableProfiler(config, activities);
      std::unique_ptr<torch::autograd::profiler::ProfilerResult> result = torch::autograd::profiler::disableProfiler();
      if (result == nullptr) return new absl::Status(absl::UnavailableError("the profiler returned no result"));
      result->save("/dev/null");
    } catch (const c10::Error& error) {
      return new absl::Status(absl::UnavailableError(Message(error)));
    }
    return new absl::Status();
  }();
  return *status;
}

}  // namespace

absl::StatusOr<std::unique_ptr<KernelTrace>> KernelTrace::Start(bool cuda) {
  // The thread's active profiler (1.13 and 2.x: torch::profiler::impl::profilerEnabled).
  if (torch::profiler::impl::profilerEnabled()) {
    return absl::FailedPreconditionError("a LibTorch profiler is already recording in this process");
  }
  if (absl::Status saves = KinetoSaves(); !saves.ok()) {
    return absl::UnavailableError(absl::StrCat("Kineto cannot record here (LibTorch ", TORCH_VERSION,
                                               " may be built without it): ", saves.message()));
  }
  std::set<ActivityType> activities = {ActivityType::CPU};
  if (cuda) activities.insert(ActivityType::CUDA);
  ProfilerConfig config(ProfilerState::KINETO);
  std::unique_ptr<KernelTrace> trace(new KernelTrace());
  try {
    torch::autograd::profiler::prepareProfiler(config, activities);
    torch::autograd::profiler::enableProfiler(config, activities);
  } catch (const c10::Error& error) {
    return absl::UnavailableError(absl::StrCat("Kineto cannot record here (LibTorch ", TORCH_VERSION,
                                               " may be built without it): ", Message(error)));
  }
  trace->recording_ = true;
  return trace;
}

absl::Status KernelTrace::StopAndSave(const std::string& path) {
  if (!recording_) return absl::FailedPreconditionError("the kernel trace was already stopped");
  recording_ = false;
  std::unique_ptr<torch::autograd::profiler::ProfilerResult> result;
  try {
    result = torch::autograd::profiler::disableProfiler();
  } catch (const c10::Error& error) {
    return absl::InternalError(absl::StrCat("stopping the Kineto trace: ", Message(error)));
  }
  if (result == nullptr) return absl::InternalError("the Kineto trace returned no result");
  // ProfilerResult::save writes in place; write beside the target and rename.
  std::string temp = absl::StrCat(path, ".tmp.", getpid());
  try {
    result->save(temp);
  } catch (const c10::Error& error) {
    unlink(temp.c_str());
    return absl::InternalError(absl::StrCat("writing the kernel trace ", path, ": ", Message(error)));
  }
  if (::access(temp.c_str(), F_OK) != 0) {
    return absl::InternalError(absl::StrCat("Kineto wrote no trace (to ", temp, ")"));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    unlink(temp.c_str());
    return absl::InternalError(absl::StrCat("cannot move the kernel trace to ", path));
  }
  return absl::OkStatus();
}

KernelTrace::~KernelTrace() {
  if (!recording_) return;
  try {
    torch::autograd::profiler::disableProfiler();
  } catch (const c10::Error&) {
    // Nothing to report from a destructor: the records are discarded either way.
  }
}

}  // namespace magi::compat
