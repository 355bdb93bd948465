#include "magi/backend/nccl_stream/nccl_stream.h"

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "magi/analysis/op_traits.h"
#include "magi/backend/common/fused_adamw.h"
#include "magi/backend/common/fused_adamw_operands.h"
#include "magi/backend/common/step_plan.h"
#include "magi/backend/nccl_stream/graph_memsets.h"
#include "magi/backend/nccl_stream/stream_plan.h"
#include "magi/backend/torch_executable.h"
#include "magi/base/file.h"
#include "magi/base/status_macros.h"
#include "magi/comm/nccl.h"
#include "magi/compat/cuda_graph.h"
#include "magi/compat/deterministic.h"
#include "magi/compat/gemm_workspace.h"
#include "magi/compat/torch_compat.h"
#include "magi/compat/torch_status.h"
#include "magi/ir/collectives.h"
#include "magi/ir/magi_ops.h"

namespace magi {
namespace {

absl::Status CudaStatus(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

absl::Status NcclStatus(ncclResult_t result, absl::string_view what) {
  if (result == ncclSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", ncclGetErrorString(result)));
}

absl::StatusOr<bool> ParseBool(const std::string& key, const std::string& value) {
  if (value == "true" || value == "1") return true;
  if (value == "false" || value == "0") return false;
  return absl::InvalidArgumentError(absl::StrCat("nccl_stream option ", key, " takes true or false, not '", value, "'"));
}

// One communication stream: a CUDA stream and the NCCL communicator that only it uses.
struct CommLane {
  std::shared_ptr<NcclCommunicator> base;  // the communicator bound for the group
  ncclComm_t comm = nullptr;               // base's, or split from it (owned then)
  bool owns_comm = false;
  c10::optional<c10::cuda::CUDAStream> stream;
};

// A collective between its start and its wait.
struct InFlight {
  std::vector<at::Tensor> inputs;   // held until the wait (see stream_plan.h)
  std::vector<at::Tensor> results;  // views of the flat output buffer(s)
};

class NcclStreamExecutable : public TorchExecutable {
 public:
  ~NcclStreamExecutable() override {
    graph_.reset();
    for (CommLane& lane : lanes_) {
      if (lane.owns_comm && lane.comm != nullptr) {
        if (lane.base != nullptr && lane.base->aborted()) {
          ncclCommAbort(lane.comm);
        } else {
          ncclCommDestroy(lane.comm);
        }
      }
    }
    for (cudaEvent_t event : events_) cudaEventDestroy(event);
    for (cudaEvent_t event : timing_events_) cudaEventDestroy(event);
  }

  absl::string_view backend_name() const override { return "nccl_stream"; }
  const RunStats& last_run_stats() const override { return stats_; }
  void set_profile_nodes(bool on) override { profile_nodes_ = on; }
  absl::Status TraceNextRun(const std::string& path) override {
    trace_path_ = path;
    return absl::OkStatus();
  }

  static absl::StatusOr<std::unique_ptr<NcclStreamExecutable>> Build(const Module& module, const Graph& graph,
                                                                     const CompileContext& context,
                                                                     const NcclStreamOptions& options) {
    auto exe = std::unique_ptr<NcclStreamExecutable>(new NcclStreamExecutable());
    exe->options_ = options;
    exe->graph_ir_ = &graph;
    MAGI_ASSIGN_OR_RETURN(exe->step_, BuildStepPlan(graph));
    StreamPlanOptions plan_options;
    plan_options.skip_single_rank_collectives = options.skip_single_rank;
    plan_options.donate_optimizer_state = options.donate;
    plan_options.defer_grad_casts = options.fuse_grad_cast;
    plan_options.overlap_optimizer = options.overlap_optimizer;
    plan_options.min_overlap_batch_elements = options.overlap_min_elements;
    MAGI_ASSIGN_OR_RETURN(exe->streams_, BuildStreamPlan(module, graph, plan_options));
    exe->deferred_cast_.assign(exe->step_.nodes.size(), 0);
    for (int index : exe->streams_.deferred_casts) exe->deferred_cast_[index] = 1;
    exe->bf16_slot_.assign(exe->step_.num_slots, 0);
    for (const Value* value : exe->streams_.bf16_for_f32) exe->bf16_slot_[exe->step_.slot_of.at(value)] = 1;
    // One line per compiled step: what the schedule does (benchmark logs and tests read it).
    std::fprintf(stderr, "magi: nccl_stream: @%s: %s\n", graph.name().c_str(), exe->streams_.Summary().c_str());
    for (const std::string& callee : exe->step_.callees) {
      auto it = context.callees.find(callee);
      if (it == context.callees.end()) {
        return absl::FailedPreconditionError(absl::StrCat("graph @", graph.name(), " calls @", callee,
                                                          ", which was not compiled"));
      }
      auto torch_callee = std::dynamic_pointer_cast<TorchExecutable>(it->second);
      if (torch_callee == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat("@", callee, " does not run LibTorch tensors"));
      }
      exe->callees_[callee] = std::move(torch_callee);
    }
    exe->release_slots_.resize(exe->step_.nodes.size());
    for (size_t i = 0; i < exe->streams_.release_after.size(); ++i) {
      for (const Value* value : exe->streams_.release_after[i]) {
        exe->release_slots_[i].push_back(exe->step_.slot_of.at(value));
      }
    }
    for (const Value* value : exe->streams_.release_at_end) {
      exe->release_at_end_slots_.push_back(exe->step_.slot_of.at(value));
    }
    for (const Node* node : graph.nodes()) {
      if (node->results().empty() || !node->result(0)->type().is_tensor()) continue;
      const Device& device = node->result(0)->type().tensor().device;
      if (device.type == DeviceType::kCuda) {
        exe->device_ = static_cast<int>(std::max<int64_t>(0, device.index));
        break;
      }
    }
    return exe;
  }

  absl::Status BindCommunicator(const std::string& group, std::shared_ptr<Communicator> communicator) override {
    if (communicator == nullptr) return absl::InvalidArgumentError("null communicator");
    communicators_[group] = std::move(communicator);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<at::Tensor>> Run(const std::vector<at::Tensor>& inputs) override {
    if (inputs.size() != step_.input_slots.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the graph takes ", step_.input_slots.size(), " inputs, ", inputs.size(), " were given"));
    }
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    MAGI_RETURN_IF_ERROR(PrepareLanes());
    Event(OptimizerJoinEvent());  // every event exists before any capture begins
    if (streams_.overlapped_batches > 0 && !optimizer_stream_) {
      optimizer_stream_ =
          c10::cuda::getStreamFromPool(/*isHighPriority=*/false, static_cast<c10::DeviceIndex>(device_));
    }
    // Only after a failed step whose wait for them failed too (see below).
    MAGI_RETURN_IF_ERROR(FinishUnjoinedOptimizerBatches());
    auto start = std::chrono::steady_clock::now();
    stats_ = RunStats();
    absl::StatusOr<std::vector<at::Tensor>> outputs;
    const bool tracing = !trace_path_.empty() || profile_nodes_;
    if (graph_ != nullptr && !tracing) {
      outputs = Replay(inputs);
    } else if (options_.cuda_graph && !graph_failed_ && !tracing && runs_ >= options_.graph_warmup) {
      outputs = CaptureAndReplay(inputs);
    } else {
      outputs = RunStreams(inputs, /*capturing=*/false, tracing);
    }
    if (!outputs.ok()) {
      // A step that failed after launching AdamW batches on the optimizer stream never
      // joined them, and they read the step's scalars, which the caller may rewrite in place
      // for its next step (StepBindings), and tensors whose memory must not be reused while
      // they run: they finish before the error is returned.
      absl::Status failed = outputs.status();
      if (absl::Status waited = FinishUnjoinedOptimizerBatches(); !waited.ok()) {
        return absl::Status(failed.code(), absl::StrCat(failed.message(), "; then ", waited.message()));
      }
      return failed;
    }
    ++runs_;
    stats_.host_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (options_.sync_each_step || tracing) MAGI_RETURN_IF_ERROR(WaitForDevice());
    if (tracing) MAGI_RETURN_IF_ERROR(CollectTimeline());
    stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    auto device_stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device_);
    // The caching allocator's peak since its stats were last reset (by the caller: a reset
    // is process-wide); index 0 is the aggregate of all pools in 1.13 and 2.x.
    stats_.peak_live_bytes = device_stats.allocated_bytes[0].peak;
    stats_.nodes_run = static_cast<int64_t>(step_.nodes.size());
    return outputs;
  }

  bool graph_captured() const { return graph_ != nullptr; }

  int64_t LibraryDeviceBytesHeld() override { return compat::GemmWorkspaceBytesOn(device_); }

  // PyTorch's GEMM workspaces the step's runs add: one for the caller's current stream (Run
  // runs the step's kernels there) and, as a CUDA graph, one for the capture stream, each
  // unless that stream holds one already. Asked at Create, on the stream the steps will run
  // from. A stream counts as holding one under any handle: 2.11 cannot name this thread's
  // handle without making its workspace; where only another thread's is held, 32 MiB more
  // come. (Measured on an H200, docs/benchmarks.md's GEMM workspaces: the small model's step captured on the device
  // left two workspaces under two handles on the default stream, most likely this thread's
  // and the autograd engine's backward thread's; the CUDA graph added the capture stream's:
  // 64 and 96 MiB.)
  int64_t LibraryDeviceBytesRunsAdd(bool count_caller_stream) override {
    bool gemms = false, bias_gemms = false;
    for (const NodePlan& plan : step_.nodes) {
      if (plan.node == nullptr) continue;
      const Node& node = *plan.node;
      // A partition's compiled kernels call cuBLAS for their matmuls (Inductor's extern mm);
      // convolutions and attention take no cuBLAS workspace.
      gemms = gemms || plan.kind == NodePlan::Kind::kCall || GetOpTraits(node.op()).matmul == MatmulKind::kMatmul;
      // addmm with a bias vector goes through cuBLASLt (and so does linear with a bias).
      bias_gemms = bias_gemms || absl::StartsWith(node.op(), "aten::addmm") ||
                   (absl::StartsWith(node.op(), "aten::linear") && node.num_operands() >= 3);
    }
    const int64_t per_stream = compat::GemmWorkspaceBytesOfNewPair(bias_gemms);
    if (per_stream < 0) return -1;
    if (!gemms) return 0;
    int64_t new_streams = 0;
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_));
    if (count_caller_stream && !compat::HoldsGemmWorkspaceFor(device_, current.stream())) ++new_streams;
    if (options_.cuda_graph && !graph_failed_ && graph_ == nullptr && streams_.capturable() &&
        !compat::HoldsGemmWorkspaceFor(device_, CaptureStream().stream())) {
      ++new_streams;
    }
    return new_streams * per_stream;
  }

 private:
  NcclStreamExecutable() = default;

  // Creates the communication streams and their communicators on first use.
  absl::Status PrepareLanes() {
    if (!lanes_.empty() || streams_.comm_streams.empty()) return absl::OkStatus();
    absl::flat_hash_map<std::string, int> lanes_of_group;
    for (const CommStream& comm_stream : streams_.comm_streams) {
      auto it = communicators_.find(comm_stream.group);
      if (it == communicators_.end()) {
        return absl::FailedPreconditionError(absl::StrCat("the graph has collectives on process group '",
                                                          comm_stream.group, "' but no communicator is bound"));
      }
      auto nccl = std::dynamic_pointer_cast<NcclCommunicator>(it->second);
      if (nccl == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat("nccl_stream needs an NCCL communicator for group '",
                                                          comm_stream.group, "' (--communicator=nccl)"));
      }
      CommLane lane;
      lane.base = nccl;
      lane.stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/true, static_cast<c10::DeviceIndex>(device_));
      if (lanes_of_group[comm_stream.group]++ == 0) {
        lane.comm = nccl->comm();
      } else {
        // One communicator must not run two collectives at once: every further stream of
        // the group gets a communicator of its own, split from the bound one.
        MAGI_RETURN_IF_ERROR(NcclStatus(ncclCommSplit(nccl->comm(), 0, nccl->rank(), &lane.comm, nullptr),
                                        absl::StrCat("splitting a communicator for group '", comm_stream.group, "'")));
        lane.owns_comm = true;
      }
      lanes_.push_back(std::move(lane));
    }
    return absl::OkStatus();
  }

  // Events_ layout: 2 per node (a collective's ready and done), the step's end, the
  // capture's start, one per optimizer-stream batch (its launch point on the compute
  // stream), and the optimizer stream's end (the join).
  size_t OptimizerBatchEvent(int batch) const { return 2 * step_.nodes.size() + 2 + batch; }
  size_t OptimizerJoinEvent() const { return 2 * step_.nodes.size() + 2 + streams_.adamw_batches.size(); }

  cudaEvent_t Event(size_t index) {
    while (events_.size() <= index) {
      cudaEvent_t event;
      cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
      events_.push_back(event);
    }
    return events_[index];
  }

  absl::StatusOr<std::vector<at::Tensor>> RunStreams(const std::vector<at::Tensor>& inputs, bool capturing,
                                                     bool timed) {
    c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_));
    if (timed) MAGI_RETURN_IF_ERROR(PrepareTimingEvents(compute));
    slots_.assign(step_.num_slots, at::Tensor());
    for (size_t i = 0; i < inputs.size(); ++i) slots_[step_.input_slots[i]] = inputs[i];
    if (step_.rng_slot >= 0) MAGI_RETURN_IF_ERROR(SetGeneratorState(step_, slots_[step_.rng_slot]));
    in_flight_.clear();
    torch::jit::Stack stack;
    for (size_t index = 0; index < step_.nodes.size(); ++index) {
      const NodePlan& plan = step_.nodes[index];
      current_node_ = static_cast<int>(index);
      switch (plan.kind) {
        case NodePlan::Kind::kOp: {
          if (deferred_cast_[index]) {
            // A bf16 -> fp32 gradient cast the multi-tensor AdamW does as it reads
            // (stream_plan.h): the bf16 tensor stands for the fp32 value.
            MAGI_RETURN_IF_ERROR(Hold(plan, Operands(plan)));
            break;
          }
          // donate=true: an op planned over a donated input (a KV cache's scatter) runs in place.
          absl::StatusOr<std::vector<at::Tensor>> results =
              CallOperator(plan, slots_, stack, {}, /*in_place=*/options_.donate);
          if (!results.ok()) return results.status();
          MAGI_RETURN_IF_ERROR(Hold(plan, *results));
          break;
        }
        case NodePlan::Kind::kCall: {
          absl::StatusOr<std::vector<at::Tensor>> results = callees_.at(plan.callee)->Run(Operands(plan));
          if (!results.ok()) {
            return absl::Status(results.status().code(),
                                absl::StrCat(Where(*plan.node), ": ", results.status().message()));
          }
          MAGI_RETURN_IF_ERROR(Hold(plan, *results));
          break;
        }
        case NodePlan::Kind::kAdamW:
          MAGI_RETURN_IF_ERROR(RunAdamW(static_cast<int>(index), compute));
          break;
        case NodePlan::Kind::kLocalShard: {
          // A copy on the compute stream; the rank is the bound communicator's.
          auto it = communicators_.find(plan.group);
          if (it == communicators_.end()) {
            return absl::FailedPreconditionError(absl::StrCat(Where(*plan.node), ": no communicator is bound to group '",
                                                              plan.group, "'"));
          }
          MAGI_RETURN_IF_ERROR(compat::CallTorchLazy([&] { return Where(*plan.node); }, [&] {
            return Hold(plan, {LocalShardOf(slots_[plan.args[0].slots[0]], it->second->rank(), it->second->size())});
          }));
          break;
        }
        case NodePlan::Kind::kCollectiveStart:
          MAGI_RETURN_IF_ERROR(StartCollective(static_cast<int>(index), compute, timed));
          break;
        case NodePlan::Kind::kWait:
          MAGI_RETURN_IF_ERROR(WaitCollective(static_cast<int>(index), compute, timed));
          break;
      }
      for (int s : release_slots_[index]) slots_[s] = at::Tensor();
      if (streams_.overlapped_batches > 0) {
        for (int batch : streams_.optimizer_batches_after[index]) {
          MAGI_RETURN_IF_ERROR(RunAdamWBatch(batch, compute, timed));
        }
      }
      if (timed) {
        MAGI_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(timing_events_[1 + index], compute.stream()), "event"));
      }
    }
    current_node_ = -1;
    if (optimizer_pending_) {
      // The join: the step ends when the optimizer stream's batches have; only then may
      // what they read go back to the compute stream's allocator.
      cudaEvent_t join = Event(OptimizerJoinEvent());
      MAGI_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(join, optimizer_stream_->stream()),
                                      "recording the end of the step's AdamW batches (optimizer stream)"));
      MAGI_RETURN_IF_ERROR(
          CudaStatus(cudaStreamWaitEvent(compute.stream(), join, 0), "joining the optimizer stream at the step's end"));
      optimizer_pending_ = false;
      optimizer_keep_alive_.clear();
    }
    for (int s : release_at_end_slots_) slots_[s] = at::Tensor();
    std::vector<at::Tensor> outputs;
    outputs.reserve(step_.output_slots.size());
    for (int s : step_.output_slots) outputs.push_back(slots_[s]);
    slots_.assign(step_.num_slots, at::Tensor());
    in_flight_.clear();
    (void)capturing;
    return outputs;
  }

  std::vector<at::Tensor> Operands(const NodePlan& plan) const {
    std::vector<at::Tensor> operands;
    operands.reserve(plan.args[0].slots.size());
    for (int s : plan.args[0].slots) operands.push_back(slots_[s]);
    return operands;
  }

  absl::Status Hold(const NodePlan& plan, const std::vector<at::Tensor>& tensors) {
    bool carries_bf16 = false;
    for (int slot : plan.result_slots) carries_bf16 = carries_bf16 || bf16_slot_[slot];
    if (!carries_bf16) {
      MAGI_RETURN_IF_ERROR(CheckResults(plan, tensors));
    } else {
      // Values that hold a deferred cast's bf16 tensor: bf16 in place of the IR's fp32.
      if (tensors.size() != plan.result_slots.size()) {
        return absl::InternalError(absl::StrCat(Where(*plan.node), ": ", tensors.size(), " results, expected ",
                                                plan.result_slots.size()));
      }
      for (size_t i = 0; i < tensors.size(); ++i) {
        bool bf16 = bf16_slot_[plan.result_slots[i]];
        absl::StatusOr<at::ScalarType> expected =
            bf16 ? absl::StatusOr<at::ScalarType>(at::kBFloat16) : compat::ToScalarType(plan.result_types[i].dtype);
        if (!expected.ok()) return expected.status();
        if (!tensors[i].defined() || tensors[i].scalar_type() != *expected ||
            tensors[i].sizes() != at::IntArrayRef(plan.result_types[i].sizes)) {
          return absl::InternalError(absl::StrCat(Where(*plan.node), ": result ", i, " is not a ",
                                                  c10::toString(*expected), " tensor of the IR's shape",
                                                  bf16 ? " (a deferred gradient cast)" : ""));
        }
      }
    }
    for (size_t i = 0; i < tensors.size(); ++i) slots_[plan.result_slots[i]] = tensors[i];
    return absl::OkStatus();
  }

  // A batch of magi::adamw on the compute stream runs when its last member is reached
  // (stream_plan.h); one on the optimizer stream was launched earlier (RunAdamWBatch); a
  // magi::adamw outside any batch runs by itself.
  absl::Status RunAdamW(int index, c10::cuda::CUDAStream compute) {
    int batch_index = streams_.adamw_batch_of_node[index];
    if (batch_index < 0) return RunAdamWMembers({index}, /*in_place=*/false, compute, std::nullopt);
    const AdamWBatch& batch = streams_.adamw_batches[batch_index];
    if (batch.run_at != index || batch.on_optimizer_stream) return absl::OkStatus();
    return RunAdamWMembers(batch.nodes, batch.in_place, compute, std::nullopt);
  }

  // Launches optimizer-stream batch `batch_index` behind everything queued on the compute
  // stream so far (its operands' producers and its state's last readers are).
  absl::Status RunAdamWBatch(int batch_index, c10::cuda::CUDAStream compute, bool timed) {
    const AdamWBatch& batch = streams_.adamw_batches[batch_index];
    OptimizerLaunch launch{batch_index, timed};
    return RunAdamWMembers(batch.nodes, batch.in_place, compute, launch);
  }

  struct OptimizerLaunch {
    int batch = -1;
    bool timed = false;
  };

  // Runs `members` as one multi-tensor AdamW (or op by op where the fused kernel does not
  // apply): on the compute stream, or with `optimizer` on the optimizer stream after an
  // event recorded on the compute stream once the kernel's inputs are queued there.
  absl::Status RunAdamWMembers(const std::vector<int>& members, bool in_place, c10::cuda::CUDAStream compute,
                               std::optional<OptimizerLaunch> optimizer) {
    const NodePlan& first = step_.nodes[members.front()];
    const Node& first_node = *first.node;
    std::vector<at::Tensor> head = Operands(first);
    // A batch is all of one form (stream_plan.cc), plain or split.
    const bool split = first.adamw_split;
    const at::ScalarType param_type = split ? at::kBFloat16 : at::kFloat;
    bool fused = head[kAdamWParam].is_cuda() && head[kAdamWParam].scalar_type() == param_type;
    for (int k : {kAdamWDecay, kAdamWStepSize, kAdamWBc2Sqrt}) {
      const at::Tensor& scalar = head[AdamWOperandIndex(first_node, k)];
      fused = fused && scalar.is_cuda() && scalar.scalar_type() == at::kFloat && scalar.get_device() == device_;
    }
    if (!fused) {
      for (int member : members) {
        const NodePlan& plan = step_.nodes[member];
        std::vector<at::Tensor> o = Operands(plan);
        MAGI_RETURN_IF_ERROR(compat::CallTorchLazy([&] { return Where(*plan.node); }, [&] {
          at::Tensor& grad = o[AdamWOperandIndex(*plan.node, kAdamWGrad)];
          if (grad.scalar_type() == at::kBFloat16) grad = grad.to(at::kFloat);
          return Hold(plan, AdamWReferenceOf(plan.adamw_split, o, plan.adamw, nullptr));
        }));
      }
      return absl::OkStatus();
    }
    std::vector<cuda::AdamWTensor> tensors;
    std::vector<std::vector<at::Tensor>> results;
    std::vector<at::Tensor> keep_alive;
    for (int member : members) {
      const NodePlan& plan = step_.nodes[member];
      const Node& node = *plan.node;
      std::vector<at::Tensor> o = Operands(plan);
      const int grad = AdamWOperandIndex(node, kAdamWGrad);
      // A deferred gradient cast leaves the gradient in bf16 (stream_plan.h).
      const bool bf16_grad = o[grad].scalar_type() == at::kBFloat16;
      const std::vector<int> state = AdamWStateOperands(node);
      std::vector<int> tensor_operands = state;
      tensor_operands.push_back(grad);
      for (int k : tensor_operands) {
        const at::ScalarType expected = FusedAdamWOperandType(split, k, bf16_grad);
        if (!o[k].is_cuda() || o[k].scalar_type() != expected || o[k].get_device() != device_) {
          return absl::InvalidArgumentError(absl::StrCat(Where(node), ": operand ", k, " is not a ",
                                                         c10::toString(expected), " tensor on cuda:", device_));
        }
        if (!o[k].is_contiguous()) {
          if (in_place && k != grad) {
            return absl::InvalidArgumentError(absl::StrCat(Where(node), ": a donated state tensor is not contiguous"));
          }
          o[k] = o[k].contiguous();
          keep_alive.push_back(o[k]);
        }
      }
      // The results in the node's order: the updated state, written over it or fresh.
      std::vector<at::Tensor> out;
      for (int k : state) out.push_back(in_place ? o[k] : at::empty_like(o[k]));
      tensors.push_back(FusedAdamWTensorOf(split, o, out));
      results.push_back(std::move(out));
    }
    cuda::AdamWScalars scalars = FusedAdamWScalarsOf(split, head, first.adamw);
    cudaStream_t stream = compute.stream();
    if (optimizer) {
      // Contiguous copies above were queued on the compute stream: the event follows them,
      // and they stay alive until the join (the allocator would otherwise reuse them).
      for (at::Tensor& tensor : keep_alive) optimizer_keep_alive_.push_back(std::move(tensor));
      cudaEvent_t launch_point = Event(OptimizerBatchEvent(optimizer->batch));
      stream = optimizer_stream_->stream();
      const std::string where = absl::StrCat(Where(*first.node), ": AdamW batch ", optimizer->batch);
      MAGI_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(launch_point, compute.stream()), where));
      MAGI_RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(stream, launch_point, 0), where));
      optimizer_pending_ = true;
      if (optimizer->timed) {
        MAGI_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(OptimizerTimingEvent(optimizer->batch, 0), stream), "event"));
      }
    }
    MAGI_RETURN_IF_ERROR(
        CudaStatus(cuda::LaunchMultiTensorAdamW(tensors.data(), static_cast<int>(tensors.size()), scalars, stream),
                   absl::StrCat(Where(*first.node), ": multi-tensor AdamW")));
    if (optimizer && optimizer->timed) {
      MAGI_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(OptimizerTimingEvent(optimizer->batch, 1), stream), "event"));
    }
    for (size_t m = 0; m < members.size(); ++m) MAGI_RETURN_IF_ERROR(Hold(step_.nodes[members[m]], results[m]));
    return absl::OkStatus();
  }

  absl::Status StartCollective(int index, c10::cuda::CUDAStream compute, bool timed) {
    const NodePlan& plan = step_.nodes[index];
    const CollectivePlan& collective = streams_.collectives[streams_.collective_of_node.at(index)];
    InFlight& flight = in_flight_[index];
    flight.inputs = Operands(plan);
    if (collective.skipped) return absl::OkStatus();  // one rank: the wait takes the inputs as they are
    if (plan.collective == CollectiveKind::kAllToAll) {
      return absl::UnimplementedError(absl::StrCat(Where(*plan.node), ": all_to_all is not implemented for NCCL"));
    }
    CommLane& lane = lanes_[collective.stream - 1];
    if (lane.base->aborted()) {
      return absl::FailedPreconditionError(
          absl::StrCat(Where(*plan.node), ": rank ", lane.base->rank(), ": the communicator was aborted"));
    }
    // Output buffers: one flat buffer per dtype, each result a view of it; allocated on the
    // compute stream before the ready event, so nothing still queued there can be using
    // the memory when the communication stream writes it.
    std::map<at::ScalarType, int64_t> flat_numel;
    std::vector<int64_t> offsets;
    for (size_t i = 0; i < plan.result_types.size(); ++i) {
      at::Tensor& input = flight.inputs[i];
      if (!input.is_cuda() || input.get_device() != device_) {
        return absl::InvalidArgumentError(absl::StrCat(Where(*plan.node), ": input ", i, " is not on cuda:", device_));
      }
      if (!input.is_contiguous()) input = input.contiguous();
      int64_t& numel = flat_numel[input.scalar_type()];
      offsets.push_back(numel);
      int64_t result_numel = 1;
      for (int64_t size : plan.result_types[i].sizes) result_numel *= size;
      numel += (result_numel + 127) / 128 * 128;  // 512-byte aligned views for NCCL
    }
    std::map<at::ScalarType, at::Tensor> flat;
    for (const auto& [type, numel] : flat_numel) {
      flat[type] = at::empty({numel}, at::TensorOptions().dtype(type).device(at::kCUDA, device_));
    }
    flight.results.clear();
    for (size_t i = 0; i < plan.result_types.size(); ++i) {
      const at::Tensor& input = flight.inputs[i];
      int64_t result_numel = 1;
      for (int64_t size : plan.result_types[i].sizes) result_numel *= size;
      flight.results.push_back(
          flat[input.scalar_type()].narrow(0, offsets[i], result_numel).view(plan.result_types[i].sizes));
    }
    for (const auto& [type, buffer] : flat) flight.inputs.push_back(buffer);  // held until the wait
    cudaEvent_t ready = Event(2 * index);
    MAGI_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(ready, compute.stream()), "cudaEventRecord"));
    cudaStream_t comm_stream = lane.stream->stream();
    MAGI_RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(comm_stream, ready, 0), "cudaStreamWaitEvent"));
    if (timed) {
      MAGI_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(CollectiveTimingEvent(index, 0), comm_stream), "event"));
    }
    absl::StatusOr<ncclRedOp_t> op = NcclReduceOp(plan.reduce_op);
    if (!op.ok()) return op.status();
    const int world = lane.base->size();
    MAGI_RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), "ncclGroupStart"));
    for (size_t i = 0; i < plan.result_types.size(); ++i) {
      const at::Tensor& input = flight.inputs[i];
      at::Tensor& output = flight.results[i];
      absl::StatusOr<ncclDataType_t> type = NcclDataType(input.scalar_type());
      ncclResult_t result = ncclSuccess;
      if (!type.ok()) {
        ncclGroupEnd();
        return absl::Status(type.status().code(), absl::StrCat(Where(*plan.node), ": ", type.status().message()));
      }
      switch (plan.collective) {
        case CollectiveKind::kAllGather:
          if (output.numel() != input.numel() * world) result = ncclInvalidArgument;
          if (result == ncclSuccess) {
            result = ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(), *type, lane.comm, comm_stream);
          }
          break;
        case CollectiveKind::kReduceScatter:
          if (output.numel() * world != input.numel()) result = ncclInvalidArgument;
          if (result == ncclSuccess) {
            result = ncclReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(), *type, *op, lane.comm,
                                       comm_stream);
          }
          break;
        case CollectiveKind::kAllReduce:
          result = ncclAllReduce(input.data_ptr(), output.data_ptr(), input.numel(), *type, *op, lane.comm,
                                 comm_stream);
          break;
        case CollectiveKind::kAllToAll:
          break;
      }
      if (result != ncclSuccess) {
        ncclGroupEnd();
        return absl::InternalError(absl::StrCat(Where(*plan.node), ": rank ", lane.base->rank(), ": tensor ", i, ": ",
                                                ncclGetErrorString(result)));
      }
    }
    MAGI_RETURN_IF_ERROR(NcclStatus(ncclGroupEnd(), absl::StrCat(Where(*plan.node), ": ncclGroupEnd")));
    if (timed) {
      MAGI_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(CollectiveTimingEvent(index, 1), comm_stream), "event"));
    }
    return CudaStatus(cudaEventRecord(Event(2 * index + 1), comm_stream), "cudaEventRecord");
  }

  absl::Status WaitCollective(int index, c10::cuda::CUDAStream compute, bool timed) {
    const NodePlan& plan = step_.nodes[index];
    const CollectivePlan& collective = streams_.collectives[streams_.collective_of_node.at(index)];
    auto flight = in_flight_.find(collective.start);
    if (flight == in_flight_.end()) return absl::InternalError(absl::StrCat(Where(*plan.node), ": no start ran"));
    std::vector<at::Tensor> results;
    if (collective.skipped) {
      for (size_t i = 0; i < plan.result_types.size(); ++i) {
        results.push_back(flight->second.inputs[i].view(plan.result_types[i].sizes));
      }
    } else {
      MAGI_RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(compute.stream(), Event(2 * collective.start + 1), 0),
                                      "cudaStreamWaitEvent"));
      results = std::move(flight->second.results);
    }
    in_flight_.erase(flight);  // the compute stream is past the collective: its buffers may be reused
    (void)timed;
    return Hold(plan, results);
  }

  // Waits for the step on the device, watching every communicator for a failed peer.
  // Waits for the AdamW batches a failed step launched on the optimizer stream and never
  // joined, then lets go of what they read (held until then: a kernel on the compute
  // stream must not get memory they may still read). OK when there are none.
  absl::Status FinishUnjoinedOptimizerBatches() {
    if (!optimizer_pending_) return absl::OkStatus();
    MAGI_RETURN_IF_ERROR(
        CudaStatus(cudaStreamSynchronize(optimizer_stream_->stream()), "waiting for a failed step's AdamW batches"));
    optimizer_keep_alive_.clear();
    optimizer_pending_ = false;
    return absl::OkStatus();
  }

  absl::Status WaitForDevice() {
    c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_));
    cudaEvent_t done = Event(2 * step_.nodes.size());
    MAGI_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(done, compute.stream()), "cudaEventRecord"));
    // No communicator to watch: the driver's own wait returns as soon as the step is done.
    if (lanes_.empty()) return CudaStatus(cudaEventSynchronize(done), "the step failed on the device");
    std::chrono::milliseconds timeout(120000);
    for (const CommLane& lane : lanes_) timeout = std::min(timeout, lane.base->timeout());
    const auto start = std::chrono::steady_clock::now();
    auto deadline = start + timeout;
    // Short sleeps until most of the previous wait has passed, then polling without
    // sleeping: a 20 us sleep_for takes ~75 us (timer slack), which a step's end would be
    // seen late by (Kineto trace of the 953M step on one H200), and polling the whole step
    // would keep a core busy that NCCL's proxy threads or other ranks may need.
    const auto poll_from = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                       std::chrono::duration<double>(0.9 * previous_wait_seconds_));
    while (true) {
      cudaError_t status = cudaEventQuery(done);
      if (status == cudaSuccess) {
        previous_wait_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        return absl::OkStatus();
      }
      if (status != cudaErrorNotReady) return CudaStatus(status, "the step failed on the device");
      for (CommLane& lane : lanes_) {
        ncclResult_t async_error = ncclSuccess;
        ncclCommGetAsyncError(lane.comm, &async_error);
        bool late = std::chrono::steady_clock::now() > deadline;
        if (async_error != ncclSuccess || late) {
          lane.base->Abort();
          if (lane.owns_comm) ncclCommAbort(lane.comm);
          lane.comm = nullptr;
          lane.owns_comm = false;
          return absl::DeadlineExceededError(absl::StrCat(
              "rank ", lane.base->rank(), ": a collective on group '", streams_.comm_streams[&lane - &lanes_[0]].group,
              "' failed: ",
              async_error != ncclSuccess ? ncclGetErrorString(async_error)
                                         : absl::StrCat("not done after ", timeout.count(), " ms"),
              " (a peer rank may be dead or hung)"));
        }
      }
      if (std::chrono::steady_clock::now() < poll_from) {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      } else {
        std::this_thread::yield();
      }
    }
  }

  // ---- CUDA graphs ----

  // The stream the graph is captured on, taken from the pool once (LibraryDeviceBytesRunsAdd
  // asks which it is before the capture). The default priority, below the communication
  // streams' (NCCL's kernels go first); the optimizer stream has the same priority as
  // compute: CUDA's lowest is the default.
  c10::cuda::CUDAStream CaptureStream() {
    if (!capture_stream_) {
      capture_stream_ = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, static_cast<c10::DeviceIndex>(device_));
    }
    return *capture_stream_;
  }

  absl::StatusOr<std::vector<at::Tensor>> CaptureAndReplay(const std::vector<at::Tensor>& inputs) {
    if (!streams_.capturable()) {
      graph_failed_ = true;
      std::fprintf(stderr, "magi: nccl_stream: the step stays in stream mode; no CUDA graph because:\n");
      for (const CaptureBlocker& blocker : streams_.capture_blockers) {
        std::fprintf(stderr, "  %s\n", blocker.reason.c_str());
      }
      return RunStreams(inputs, false, false);
    }
    c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_));
    const c10::cuda::CUDAStream capture_stream = CaptureStream();
    MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> static_inputs, StaticInputsFor(inputs));
    // The capture stream starts after everything the caller queued (inputs being made).
    cudaEvent_t ready = Event(2 * step_.nodes.size() + 1);
    MAGI_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(ready, caller.stream()), "cudaEventRecord"));
    MAGI_RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(capture_stream.stream(), ready, 0), "cudaStreamWaitEvent"));
    const bool edit = options_.graph_memset_kernels && compat::kCanEditCapturedCudaGraph;
    std::unique_ptr<at::cuda::CUDAGraph> graph = compat::NewCudaGraph(/*editable=*/edit);
    absl::StatusOr<std::vector<at::Tensor>> outputs;
    std::string failure;
    {
      c10::cuda::CUDAStreamGuard on_capture_stream(capture_stream);
      absl::Status captured = compat::CallTorch("", [&] {
        graph->capture_begin();
        outputs = RunStreams(static_inputs, /*capturing=*/true, /*timed=*/false);
        graph->capture_end();
        if (outputs.ok()) {
          if (edit) RewriteMemsets(*graph);
          compat::InstantiateCudaGraph(*graph, edit);
        }
      });
      if (!captured.ok()) failure = std::string(captured.message());
      if (failure.empty() && !outputs.ok()) failure = std::string(outputs.status().message());
      if (!failure.empty()) {
        // Leave capture mode whatever state the failure left it in.
        cudaStreamCaptureStatus status;
        if (cudaStreamIsCapturing(capture_stream.stream(), &status) == cudaSuccess &&
            status != cudaStreamCaptureStatusNone) {
          cudaGraph_t broken = nullptr;
          cudaStreamEndCapture(capture_stream.stream(), &broken);
          if (broken != nullptr) cudaGraphDestroy(broken);
        }
        cudaGetLastError();
      }
    }
    if (!failure.empty()) {
      graph_failed_ = true;
      std::string node = current_node_ >= 0 ? step_.nodes[current_node_].node->DebugName() : "(not one node)";
      std::fprintf(stderr, "magi: nccl_stream: CUDA graph capture failed at %s: %s; staying in stream mode\n",
                   node.c_str(), failure.c_str());
      return RunStreams(inputs, false, false);
    }
    graph_ = std::move(graph);
    static_inputs_ = std::move(static_inputs);
    static_outputs_ = *std::move(outputs);
    // Capture ran nothing: the first replay is this step. Order it after the caller's stream.
    return Replay(static_inputs_);
  }

  // The tensors the graph reads its inputs from on every replay (Replay copies each run's
  // inputs into them). Parameters, buffers, optimizer state and donated inputs are the
  // caller's own tensors: the caller hands the same memory back each run (a KV cache, a
  // parameter shard) and the graph updates it in place. Every other input (a batch's tokens,
  // positions) gets a copy the runtime owns: a replay overwrites its static inputs, and the
  // caller may still hold the tensor it passed (generation keeps each step's tokens, which
  // are also the next step's input) - a later replay wrote the next token into it.
  absl::StatusOr<std::vector<at::Tensor>> StaticInputsFor(const std::vector<at::Tensor>& inputs) const {
    absl::flat_hash_set<const Value*> donated;
    for (const GraphOutput& output : graph_ir_->outputs()) {
      if (output.aliases != nullptr) donated.insert(output.aliases);
    }
    std::vector<at::Tensor> owned = inputs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Value* input = graph_ir_->inputs()[i];
      if (input->role() != InputRole::kData || donated.contains(input) || !inputs[i].defined()) continue;
      MAGI_RETURN_IF_ERROR(compat::CallTorchLazy(
          [&] { return absl::StrCat("copying input %", input->name(), " for the CUDA graph"); }, [&] {
            const at::Tensor& given = inputs[i];
            owned[i] = given.is_non_overlapping_and_dense()
                           ? at::empty_strided(given.sizes(), given.strides(), given.options()).copy_(given)
                           : given.clone();
          }));
    }
    return owned;
  }

  // cuBLAS's 4-byte workspace memsets as kernel nodes (graph_memsets.h says why). A failed
  // rewrite leaves a graph that still does what was captured: it is warned about, not fatal.
  static void RewriteMemsets(at::cuda::CUDAGraph& graph) {
    constexpr size_t kMaxBytes = 4096;
    cuda::MemsetRewrite rewrite;
    absl::Status rewritten = CudaStatus(
        cuda::RewriteSmallMemsetsAsKernels(compat::CapturedCudaGraph(graph, /*editable=*/true), kMaxBytes, &rewrite),
        "rewriting its memset nodes as kernel nodes");
    if (!rewritten.ok()) {
      cudaGetLastError();  // the error is reported here; the graph is instantiated as it stands
      std::fprintf(stderr, "magi: nccl_stream: CUDA graph: %s; %d rewritten before it (graph_memset_kernels=false "
                   "skips this)\n", std::string(rewritten.message()).c_str(), rewrite.rewritten);
      return;
    }
    if (rewrite.rewritten + rewrite.kept == 0) return;
    std::fprintf(stderr, "magi: nccl_stream: CUDA graph: %d memset nodes of <= %zu bytes run as kernel nodes, %d kept\n",
                 rewrite.rewritten, kMaxBytes, rewrite.kept);
  }

  absl::StatusOr<std::vector<at::Tensor>> Replay(const std::vector<at::Tensor>& inputs) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const at::Tensor& captured = static_inputs_[i];
      const at::Tensor& given = inputs[i];
      if (given.unsafeGetTensorImpl() == captured.unsafeGetTensorImpl() ||
          (given.data_ptr() == captured.data_ptr() && given.sizes() == captured.sizes() &&
           given.strides() == captured.strides() && given.scalar_type() == captured.scalar_type())) {
        continue;  // the same memory the graph reads (donated state, reused buffers)
      }
      if (given.sizes() != captured.sizes() || given.scalar_type() != captured.scalar_type()) {
        return absl::InvalidArgumentError(absl::StrCat("input ", i, " (%", graph_ir_->inputs()[i]->name(),
                                                       ") changed shape or dtype since the CUDA graph was captured"));
      }
      MAGI_RETURN_IF_ERROR(
          compat::CallTorchLazy([&] { return absl::StrCat("input %", graph_ir_->inputs()[i]->name()); },
                                [&] { static_inputs_[i].copy_(given, /*non_blocking=*/true); }));
    }
    MAGI_RETURN_IF_ERROR(compat::CallTorch("CUDA graph replay", [&] { graph_->replay(); }));
    return static_outputs_;
  }

  // ---- timelines (trace and per-node times) ----

  // A partition call is named by its callee (which partition ran), other nodes by their op.
  static std::string TraceName(const Node& node) {
    if (node.op() == kCallOp) return absl::StrCat(node.op(), " ", CalleeName(node));
    return node.op();
  }

  absl::Status PrepareTimingEvents(c10::cuda::CUDAStream compute) {
    size_t needed = 1 + step_.nodes.size() + 2 * step_.nodes.size() + 2 * streams_.adamw_batches.size();
    while (timing_events_.size() < needed) {
      cudaEvent_t event;
      MAGI_RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&event), "cudaEventCreate"));
      timing_events_.push_back(event);
    }
    return CudaStatus(cudaEventRecord(timing_events_[0], compute.stream()), "cudaEventRecord");
  }

  cudaEvent_t CollectiveTimingEvent(int start_index, int which) {
    return timing_events_[1 + step_.nodes.size() + 2 * start_index + which];
  }

  cudaEvent_t OptimizerTimingEvent(int batch, int which) {
    return timing_events_[1 + 3 * step_.nodes.size() + 2 * batch + which];
  }

  absl::Status CollectTimeline() {
    const size_t n = step_.nodes.size();
    auto since_begin = [&](cudaEvent_t event) {
      float ms = 0;
      cudaEventElapsedTime(&ms, timing_events_[0], event);
      return static_cast<double>(ms) * 1e-3;
    };
    std::vector<double> end(n);
    for (size_t i = 0; i < n; ++i) end[i] = since_begin(timing_events_[1 + i]);
    if (profile_nodes_) {
      stats_.node_seconds.assign(n, 0.0);
      double previous = 0;
      for (size_t i = 0; i < n; ++i) {
        stats_.node_seconds[i] = std::max(0.0, end[i] - previous);
        previous = end[i];
      }
      // A collective's time is its span on the communication stream (start + wait, as
      // calibration tables record it), charged to the start.
      for (const CollectivePlan& collective : streams_.collectives) {
        if (collective.skipped) continue;
        stats_.node_seconds[collective.start] = std::max(
            0.0, since_begin(CollectiveTimingEvent(collective.start, 1)) -
                     since_begin(CollectiveTimingEvent(collective.start, 0)));
        stats_.node_seconds[collective.wait] = 0;
      }
      // An optimizer-stream batch's span, charged to its last member (as a batch on the
      // compute stream is: it runs there).
      for (const AdamWBatch& batch : streams_.adamw_batches) {
        if (!batch.on_optimizer_stream) continue;
        size_t b = &batch - &streams_.adamw_batches[0];
        for (int member : batch.nodes) stats_.node_seconds[member] = 0;
        stats_.node_seconds[batch.nodes.back()] =
            std::max(0.0, since_begin(OptimizerTimingEvent(b, 1)) - since_begin(OptimizerTimingEvent(b, 0)));
      }
    }
    if (trace_path_.empty()) return absl::OkStatus();
    std::string json = "{\"traceEvents\":[\n";
    absl::StrAppend(&json, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"compute\"}}");
    for (size_t k = 0; k < streams_.comm_streams.size(); ++k) {
      absl::StrAppendFormat(&json,
                            ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":\"comm "
                            "%s/%d\"}}",
                            k + 1, streams_.comm_streams[k].group, streams_.comm_streams[k].annotated_stream);
    }
    double previous = 0;
    for (size_t i = 0; i < n; ++i) {
      const Node& node = *step_.nodes[i].node;
      double begin = previous, finish = end[i];
      previous = finish;
      if (finish - begin < 1e-7) continue;
      absl::StrAppendFormat(&json,
                            ",\n{\"name\":\"%s\",\"cat\":\"compute\",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":%.3f,"
                            "\"dur\":%.3f,\"args\":{\"module\":\"%s\",\"node\":%d}}",
                            TraceName(node), begin * 1e6, (finish - begin) * 1e6, node.annotations().module_path, i);
    }
    if (streams_.overlapped_batches > 0) {
      const int tid = static_cast<int>(streams_.comm_streams.size()) + 1;
      absl::StrAppendFormat(&json,
                            ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":"
                            "\"optimizer\"}}",
                            tid);
      for (size_t b = 0; b < streams_.adamw_batches.size(); ++b) {
        const AdamWBatch& batch = streams_.adamw_batches[b];
        if (!batch.on_optimizer_stream) continue;
        double begin = since_begin(OptimizerTimingEvent(b, 0));
        double finish = since_begin(OptimizerTimingEvent(b, 1));
        absl::StrAppendFormat(&json,
                              ",\n{\"name\":\"magi::adamw x%d\",\"cat\":\"optimizer\",\"ph\":\"X\",\"pid\":0,"
                              "\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"after_node\":%d}}",
                              batch.nodes.size(), tid, begin * 1e6, (finish - begin) * 1e6, batch.run_at);
      }
    }
    for (const CollectivePlan& collective : streams_.collectives) {
      if (collective.skipped) continue;
      double begin = since_begin(CollectiveTimingEvent(collective.start, 0));
      double finish = since_begin(CollectiveTimingEvent(collective.start, 1));
      const Node& node = *step_.nodes[collective.start].node;
      absl::StrAppendFormat(&json,
                            ",\n{\"name\":\"%s\",\"cat\":\"communication\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,"
                            "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"tensors\":%d,\"node\":%d}}",
                            node.op(), collective.stream, begin * 1e6, (finish - begin) * 1e6, node.num_operands(),
                            collective.start);
    }
    absl::StrAppend(&json, "\n]}\n");
    std::string path = trace_path_;
    trace_path_.clear();
    return WriteFileAtomically(path, json);
  }

  NcclStreamOptions options_;
  const Graph* graph_ir_ = nullptr;
  StepPlan step_;
  StreamPlan streams_;
  std::vector<std::vector<int>> release_slots_;
  std::vector<int> release_at_end_slots_;  // released after the optimizer stream's join
  c10::optional<c10::cuda::CUDAStream> optimizer_stream_;
  c10::optional<c10::cuda::CUDAStream> capture_stream_;  // CaptureStream
  bool optimizer_pending_ = false;                // batches launched since the last join
  std::vector<at::Tensor> optimizer_keep_alive_;  // contiguous copies the optimizer stream reads
  std::vector<char> deferred_cast_;  // per node: a gradient cast AdamW does (stream_plan.h)
  std::vector<char> bf16_slot_;      // per slot: holds the bf16 tensor of a deferred cast
  absl::flat_hash_map<std::string, std::shared_ptr<TorchExecutable>> callees_;
  absl::flat_hash_map<std::string, std::shared_ptr<Communicator>> communicators_;
  std::vector<CommLane> lanes_;
  int device_ = 0;
  std::vector<at::Tensor> slots_;
  absl::flat_hash_map<int, InFlight> in_flight_;  // start node -> its collective
  std::vector<cudaEvent_t> events_;               // 2 per node index (ready, done), + step end, + capture
  std::vector<cudaEvent_t> timing_events_;
  int current_node_ = -1;
  int64_t runs_ = 0;
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
  bool graph_failed_ = false;
  double previous_wait_seconds_ = 0;  // WaitForDevice's last wait with communicators to watch
  std::vector<at::Tensor> static_inputs_;
  std::vector<at::Tensor> static_outputs_;
  bool profile_nodes_ = false;
  std::string trace_path_;
  RunStats stats_;
};

}  // namespace

absl::StatusOr<NcclStreamOptions> NcclStreamOptions::FromComponentOptions(const ComponentOptions& options) {
  NcclStreamOptions parsed;
  for (const auto& [key, value] : options) {
    if (key == "cuda_graph") {
      MAGI_ASSIGN_OR_RETURN(parsed.cuda_graph, ParseBool(key, value));
    } else if (key == "skip_single_rank") {
      MAGI_ASSIGN_OR_RETURN(parsed.skip_single_rank, ParseBool(key, value));
    } else if (key == "donate") {
      MAGI_ASSIGN_OR_RETURN(parsed.donate, ParseBool(key, value));
    } else if (key == "fuse_grad_cast") {
      MAGI_ASSIGN_OR_RETURN(parsed.fuse_grad_cast, ParseBool(key, value));
    } else if (key == "overlap_optimizer") {
      MAGI_ASSIGN_OR_RETURN(parsed.overlap_optimizer, ParseBool(key, value));
    } else if (key == "overlap_min_elements") {
      if (!absl::SimpleAtoi(value, &parsed.overlap_min_elements) || parsed.overlap_min_elements < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("nccl_stream option overlap_min_elements takes N >= 1 parameters, not '", value, "'"));
      }
    } else if (key == "sync_each_step") {
      MAGI_ASSIGN_OR_RETURN(parsed.sync_each_step, ParseBool(key, value));
    } else if (key == "graph_memset_kernels") {
      MAGI_ASSIGN_OR_RETURN(parsed.graph_memset_kernels, ParseBool(key, value));
    } else if (key == "graph_warmup") {
      if (!absl::SimpleAtoi(value, &parsed.graph_warmup) || parsed.graph_warmup < 1) {
        return absl::InvalidArgumentError(absl::StrCat("nccl_stream option graph_warmup takes N >= 1, not '", value,
                                                       "' (one stream-mode run must come before capture)"));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "nccl_stream takes cuda_graph, graph_warmup, skip_single_rank, donate, fuse_grad_cast, overlap_optimizer, "
          "overlap_min_elements, sync_each_step and graph_memset_kernels, not '",
          key, "'"));
    }
  }
  return parsed;
}

Capability NcclStreamBackend::GetCapability(const Module& module, const Graph& graph) const {
  Capability capability;
  for (const Node* node : graph.nodes()) {
    std::string reason = WhyNotRunnable(*node);
    if (!reason.empty()) capability.unsupported.emplace_back(node, std::move(reason));
  }
  return capability;
}

absl::StatusOr<std::unique_ptr<Executable>> NcclStreamBackend::Compile(const Module& module, const Graph& graph,
                                                                       const CompileContext& context) const {
  // Deterministic steps: ATen's kernels in deterministic mode (cuBLAS then also refuses a
  // workspace configuration that is not fixed); the multi-tensor AdamW is one thread per
  // element; each bucket is one NCCL call in a fixed order on NCCL pinned to Ring/Simple
  // (the NCCL communicator checks that when it starts); a CUDA graph replays the same
  // kernels. Nothing here autotunes.
  if (context.deterministic) MAGI_RETURN_IF_ERROR(compat::CheckDeterministicAlgorithms(name()));
  MAGI_ASSIGN_OR_RETURN(std::unique_ptr<NcclStreamExecutable> exe,
                        NcclStreamExecutable::Build(module, graph, context, options_));
  return std::unique_ptr<Executable>(std::move(exe));
}

MAGI_REGISTER(Backend, "nccl_stream",
              [](const ComponentOptions& options) -> absl::StatusOr<std::unique_ptr<Backend>> {
                MAGI_ASSIGN_OR_RETURN(NcclStreamOptions parsed, NcclStreamOptions::FromComponentOptions(options));
                return std::make_unique<NcclStreamBackend>(parsed);
              });

}  // namespace magi
