#include "magi/runtime/nccl/nccl_communicator.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"
#include "magi/compat/torch_status.h"
#include "magi/registry/registry.h"
#include "magi/runtime/deterministic/deterministic.h"

namespace magi {

namespace {

class NcclHandle : public CollectiveHandle {
 public:
  NcclHandle(std::function<absl::Status(cudaEvent_t)> wait, cudaEvent_t done, std::vector<at::Tensor> outputs)
      : wait_(std::move(wait)), done_(done), outputs_(std::move(outputs)) {}
  ~NcclHandle() override { cudaEventDestroy(done_); }
  absl::StatusOr<std::vector<at::Tensor>> Wait() override {
    absl::Status status = wait_(done_);
    if (!status.ok()) return status;
    return outputs_;
  }

 private:
  std::function<absl::Status(cudaEvent_t)> wait_;
  cudaEvent_t done_;
  std::vector<at::Tensor> outputs_;
};

class NcclCommunicatorImpl : public NcclCommunicator {
 public:
  NcclCommunicatorImpl(ncclComm_t comm, int rank, int size, std::string group, int device,
                   std::chrono::milliseconds timeout)
      : comm_(comm),
        rank_(rank),
        size_(size),
        group_(std::move(group)),
        device_(device),
        timeout_(timeout),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, static_cast<c10::DeviceIndex>(device))) {}
  ~NcclCommunicatorImpl() override {
    if (!aborted_) ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  ncclComm_t comm() const override { return comm_; }
  int device() const override { return device_; }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  void Abort() override {
    if (aborted_) return;
    ncclCommAbort(comm_);
    aborted_ = true;
  }
  bool aborted() const override { return aborted_; }

  absl::StatusOr<std::unique_ptr<CollectiveHandle>> Start(CollectiveKind kind, std::vector<at::Tensor> inputs,
                                                          const std::string& reduce_op) override {
    std::string name(CollectiveStartOp(kind));
    if (aborted_) return absl::FailedPreconditionError(absl::StrCat("rank ", rank_, ": ", name, " on group '", group_,
                                                                    "' refused: the communicator was aborted"));
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_));
    if (kind == CollectiveKind::kAllToAll) return absl::UnimplementedError("all_to_all is not implemented for NCCL yet");
    absl::StatusOr<ncclRedOp_t> op = NcclReduceOp(reduce_op);
    if (!op.ok()) return op.status();
    // Inputs made contiguous and outputs allocated on the compute stream BEFORE the comm stream
    // is ordered after it: whatever those allocations enqueue (deterministic mode's fill of
    // uninitialized memory, a contiguous copy) then happens before the collective reads or
    // writes the buffers. Allocated after the event, the fill raced the collective and could
    // overwrite its result with NaN (seen on an H200: final weights of one deterministic run).
    std::vector<at::Tensor> outputs;
    std::vector<ncclDataType_t> types;
    for (at::Tensor& input : inputs) {
      if (!input.is_cuda()) return absl::InvalidArgumentError("the NCCL communicator takes CUDA tensors");
      absl::StatusOr<ncclDataType_t> type = NcclDataType(input.scalar_type());
      if (!type.ok()) return type.status();
      types.push_back(*type);
      input = input.contiguous();
      std::vector<int64_t> sizes = input.sizes().vec();
      if (kind == CollectiveKind::kAllGather) sizes[0] *= size_;
      if (kind == CollectiveKind::kReduceScatter) sizes[0] /= size_;
      outputs.push_back(at::empty(sizes, input.options()));
    }
    cudaEvent_t ready;
    cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
    cudaEventRecord(ready, compute.stream());
    cudaStreamWaitEvent(stream_.stream(), ready, 0);
    cudaEventDestroy(ready);
    ncclGroupStart();
    for (size_t i = 0; i < inputs.size(); ++i) {
      const at::Tensor& input = inputs[i];
      const at::Tensor& output = outputs[i];
      ncclResult_t result = ncclSuccess;
      switch (kind) {
        case CollectiveKind::kAllGather:
          result = ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(), types[i], comm_, stream_.stream());
          break;
        case CollectiveKind::kReduceScatter:
          result = ncclReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(), types[i], *op, comm_,
                                     stream_.stream());
          break;
        case CollectiveKind::kAllReduce:
          result =
              ncclAllReduce(input.data_ptr(), output.data_ptr(), input.numel(), types[i], *op, comm_, stream_.stream());
          break;
        case CollectiveKind::kAllToAll:
          break;  // refused above
      }
      if (result != ncclSuccess) {
        ncclGroupEnd();
        return absl::InternalError(absl::StrCat("rank ", rank_, ": ", name, ": ", ncclGetErrorString(result)));
      }
      // The caching allocator must not hand these blocks out before the comm stream is done.
      c10::cuda::CUDACachingAllocator::recordStream(input.storage().data_ptr(), stream_);
      c10::cuda::CUDACachingAllocator::recordStream(output.storage().data_ptr(), stream_);
    }
    ncclResult_t grouped = ncclGroupEnd();
    if (grouped != ncclSuccess) {
      return absl::InternalError(absl::StrCat("rank ", rank_, ": ", name, ": ", ncclGetErrorString(grouped)));
    }
    cudaEvent_t done;
    cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    cudaEventRecord(done, stream_.stream());
    auto wait = [this, name](cudaEvent_t event) { return WaitFor(event, name); };
    return std::unique_ptr<CollectiveHandle>(new NcclHandle(wait, done, std::move(outputs)));
  }

 private:
  absl::Status WaitFor(cudaEvent_t event, const std::string& name) {
    auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (true) {
      cudaError_t status = cudaEventQuery(event);
      if (status == cudaSuccess) break;
      if (status != cudaErrorNotReady) {
        return absl::InternalError(absl::StrCat("rank ", rank_, ": ", name, ": ", cudaGetErrorString(status)));
      }
      ncclResult_t async_error = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async_error);
      if (async_error != ncclSuccess || std::chrono::steady_clock::now() > deadline) {
        Abort();
        return absl::DeadlineExceededError(absl::StrCat(
            "rank ", rank_, ": ", name, " on group '", group_, "' failed (timeout ", timeout_.count(),
            " ms; a peer rank may be dead or hung)",
            async_error != ncclSuccess ? absl::StrCat(": ", ncclGetErrorString(async_error)) : std::string()));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_));
    cudaStreamWaitEvent(compute.stream(), event, 0);
    return absl::OkStatus();
  }

  ncclComm_t comm_;
  int rank_;
  int size_;
  std::string group_;
  int device_;
  std::chrono::milliseconds timeout_;
  c10::cuda::CUDAStream stream_;
  bool aborted_ = false;
};

}  // namespace

absl::StatusOr<std::shared_ptr<Communicator>> CreateNcclCommunicator(c10::intrusive_ptr<c10d::Store> store, int rank,
                                                                     int size, const std::string& group_name,
                                                                     int device_index,
                                                                     std::chrono::milliseconds timeout) {
  std::string key = "magi/nccl/" + group_name + "/id";
  ncclUniqueId id;
  // The store throws (c10::Error, or a socket's std::exception) when a peer is gone.
  MAGI_RETURN_IF_ERROR(compat::CallTorchWith(
      [&]() -> absl::Status {
        if (rank == 0) {
          ncclResult_t result = ncclGetUniqueId(&id);
          if (result != ncclSuccess) {
            return absl::InternalError(absl::StrCat("ncclGetUniqueId: ", ncclGetErrorString(result)));
          }
          const uint8_t* bytes = reinterpret_cast<const uint8_t*>(&id);
          store->set(key, std::vector<uint8_t>(bytes, bytes + sizeof(id)));
        } else {
          std::vector<uint8_t> bytes = store->get(key);
          if (bytes.size() != sizeof(id)) return absl::InternalError("malformed NCCL unique id in the store");
          std::memcpy(&id, bytes.data(), sizeof(id));
        }
        return absl::OkStatus();
      },
      [&](const compat::CaughtException& caught) {
        return absl::UnavailableError(
            absl::StrCat("rank ", rank, ": NCCL bootstrap for group '", group_name, "' failed: ", caught.message));
      }));
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_index));
  ncclComm_t comm;
  ncclResult_t result = ncclCommInitRank(&comm, size, id, rank);
  if (result != ncclSuccess) {
    return absl::UnavailableError(absl::StrCat("rank ", rank, ": ncclCommInitRank for group '", group_name,
                                               "': ", ncclGetErrorString(result)));
  }
  return std::shared_ptr<Communicator>(new NcclCommunicatorImpl(comm, rank, size, group_name, device_index, timeout));
}

}  // namespace magi

namespace magi {
namespace {

class NcclProvider : public CommunicatorProvider {
 public:
  absl::StatusOr<std::shared_ptr<Communicator>> Create(const CommunicatorOptions& options) const override {
    if (options.deterministic) {
      // NCCL reads these when its first communicator starts: pin them now (a no-op after
      // EnableDeterministicMode) or refuse a conflicting environment.
      absl::Status pinned = PinNcclForDeterminism();
      if (!pinned.ok()) return absl::Status(pinned.code(), absl::StrCat("rank ", options.rank, ": ", pinned.message()));
    }
    return CreateNcclCommunicator(options.store, options.rank, options.size, options.group_name, options.device_index,
                                  options.timeout);
  }
};

MAGI_REGISTER(CommunicatorProvider, "nccl",
              [](const ComponentOptions& options) -> absl::StatusOr<std::unique_ptr<CommunicatorProvider>> {
                if (!options.empty()) return absl::InvalidArgumentError("the nccl communicator takes no options");
                return std::make_unique<NcclProvider>();
              });

}  // namespace
}  // namespace magi
