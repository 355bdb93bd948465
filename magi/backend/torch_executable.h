// The run interface of executables that take and return LibTorch tensors.
//
//   absl::StatusOr<std::unique_ptr<TorchExecutable>> exe = CompileForTorch("interpreter", module, "train_step");
//   absl::StatusOr<std::vector<at::Tensor>> outputs = (*exe)->Run(inputs);   // graph input/output order
//   (*exe)->last_run_stats().peak_live_bytes;
#ifndef MAGI_BACKEND_TORCH_EXECUTABLE_H_
#define MAGI_BACKEND_TORCH_EXECUTABLE_H_

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "magi/backend/backend.h"
#include "magi/comm/communicator.h"

namespace magi {

struct RunStats {
  int64_t nodes_run = 0;
  // Most bytes of tensor storage the executable held at once (inputs included).
  int64_t peak_live_bytes = 0;
  // Most bytes of storage made by the run (not its inputs) live at once, its results
  // included: what it adds to its caller's memory while it runs (a partition call's
  // working bytes, CostModel::WorkingBytes). -1: the backend does not say.
  int64_t peak_allocated_bytes = -1;
  double seconds = 0;
  // Host time spent issuing the step (before any wait for the device to finish it).
  double host_seconds = 0;
  // Wall time of each node in program order, when profiling is on (set_profile_nodes).
  // A collective whose communicator reports when it ran (CollectiveHandle::timing) has
  // its duration on its start and 0 on its wait, wherever the two are in the program (the
  // nccl_stream runtime times its collectives so too; the interpreter adds the time its
  // thread spent issuing it and taking its results, outside the wait's blocking, to the
  // start); otherwise a start's time is the
  // enqueue and its wait's the blocking. On CUDA the interpreter's are host times
  // (kernels are asynchronous), so calibrate on CPU or synchronize.
  std::vector<double> node_seconds;
};

class TorchExecutable : public Executable {
 public:
  // Runs the graph on `inputs` (in graph input order); returns the outputs in graph
  // output order. Callable many times with new inputs; not concurrently.
  virtual absl::StatusOr<std::vector<at::Tensor>> Run(const std::vector<at::Tensor>& inputs) = 0;
  // Run with the inputs handed over (donation, GraphOutput::aliases): the executable may
  // free each input after its last read and write an output over the input it aliases,
  // in place (the memory plan of magi/analysis counts on both). Tensors the caller still
  // references see those writes; a caller donates what it no longer needs. Default: Run.
  virtual absl::StatusOr<std::vector<at::Tensor>> RunDonating(std::vector<at::Tensor> inputs) { return Run(inputs); }
  virtual const RunStats& last_run_stats() const = 0;
  // Records RunStats::node_seconds on later runs (off by default: it costs a clock read per node).
  virtual void set_profile_nodes(bool on) = 0;
  // Device memory that libraries hold outside any graph's values, on CUDA PyTorch's GEMM
  // workspaces (one per cuBLAS handle and stream that ran a GEMM; kept from then on:
  // magi/compat/gemm_workspace.h). The caching allocator counts it, and so does
  // peak_live_bytes of a runtime that reports the allocator's peak; no memory plan does.
  // LibraryDeviceBytesHeld: what is held now on the executable's device.
  // LibraryDeviceBytesRunsAdd: what this executable's runs will add to it as configured
  // (asked before the first Run), the caller's current stream's workspace included with
  // `count_caller_stream` (two executables run from one stream count it once). 0: nothing
  // (CPU, or a backend whose peak_live_bytes counts only the graph's storages); -1: unknown.
  virtual int64_t LibraryDeviceBytesHeld() { return 0; }
  virtual int64_t LibraryDeviceBytesRunsAdd(bool count_caller_stream) {
    (void)count_caller_stream;
    return 0;
  }
  // Writes a Chrome/Perfetto timeline of the next Run to `path` (device-timed where the
  // backend runs on a device). Unimplemented where the backend cannot.
  virtual absl::Status TraceNextRun(const std::string& path) {
    return absl::UnimplementedError(absl::StrCat("backend '", backend_name(), "' writes no timelines"));
  }
  // Supplies the communicator for process group `group`; Run fails, naming the group,
  // when the graph has collectives on a group with none bound.
  virtual absl::Status BindCommunicator(const std::string& group, std::shared_ptr<Communicator> communicator) = 0;
};

// Looks `backend` up in the registry, compiles `graph_name` of `module`, and checks
// that the result runs LibTorch tensors.
absl::StatusOr<std::unique_ptr<TorchExecutable>> CompileForTorch(absl::string_view backend, const Module& module,
                                                                 absl::string_view graph_name);

}  // namespace magi

#endif  // MAGI_BACKEND_TORCH_EXECUTABLE_H_
