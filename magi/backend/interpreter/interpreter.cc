#include "magi/backend/interpreter/interpreter.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "magi/analysis/op_traits.h"
#include "magi/backend/common/step_plan.h"
#include "magi/backend/torch_executable.h"
#include "magi/base/status_macros.h"
#include "magi/compat/deterministic.h"
#include "magi/compat/torch_compat.h"
#include "magi/compat/torch_status.h"
#include "magi/ir/collectives.h"
#include "magi/ir/magi_ops.h"
#include "magi/registry/registry.h"

namespace magi {
namespace {

class InterpreterExecutable : public TorchExecutable {
 public:
  absl::string_view backend_name() const override { return "interpreter"; }
  const RunStats& last_run_stats() const override { return stats_; }

  static absl::StatusOr<std::unique_ptr<InterpreterExecutable>> Build(const Graph& graph,
                                                                      const CompileContext& context) {
    auto exe = std::unique_ptr<InterpreterExecutable>(new InterpreterExecutable());
    MAGI_ASSIGN_OR_RETURN(exe->step_, BuildStepPlan(graph));
    for (const NodePlan& plan : exe->step_.nodes) {
      exe->writes_operands_.push_back(plan.kind == NodePlan::Kind::kOp && GetOpTraits(plan.node->op()).side_effects);
    }
    for (const std::string& callee : exe->step_.callees) {
      auto it = context.callees.find(callee);
      if (it == context.callees.end()) {
        return absl::FailedPreconditionError(
            absl::StrCat("graph @", graph.name(), " calls @", callee, ", which was not compiled"));
      }
      std::shared_ptr<TorchExecutable> torch_callee = std::dynamic_pointer_cast<TorchExecutable>(it->second);
      if (torch_callee == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat("@", callee, " was compiled by backend '",
                                                          it->second->backend_name(),
                                                          "', which does not run LibTorch tensors"));
      }
      exe->callees_[callee] = std::move(torch_callee);
    }
    return exe;
  }

  void set_profile_nodes(bool on) override { profile_nodes_ = on; }

  absl::Status BindCommunicator(const std::string& group, std::shared_ptr<Communicator> communicator) override {
    if (communicator == nullptr) return absl::InvalidArgumentError("null communicator");
    communicators_[group] = std::move(communicator);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<at::Tensor>> Run(const std::vector<at::Tensor>& inputs) override {
    std::vector<at::Tensor> held = inputs;
    return RunImpl(held, /*donated=*/false);
  }

  absl::StatusOr<std::vector<at::Tensor>> RunDonating(std::vector<at::Tensor> inputs) override {
    return RunImpl(inputs, /*donated=*/true);
  }

 private:
  // `inputs` is emptied once its tensors are in the slots when they are donated, so each
  // is freed after its last read.
  absl::StatusOr<std::vector<at::Tensor>> RunImpl(std::vector<at::Tensor>& inputs, bool donated) {
    for (const std::string& group : step_.groups) {
      if (!communicators_.contains(group)) {
        return absl::FailedPreconditionError(
            absl::StrCat("the graph has collectives on process group '", group, "' but no communicator is bound"));
      }
    }
    auto start = std::chrono::steady_clock::now();
    if (inputs.size() != step_.input_slots.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the graph takes ", step_.input_slots.size(), " inputs, ", inputs.size(), " were given"));
    }
    stats_ = RunStats();
    stats_.peak_allocated_bytes = 0;
    live_bytes_ = 0;
    allocated_bytes_ = 0;
    storage_refs_.clear();
    slots_.assign(step_.num_slots, at::Tensor());
    input_storages_.clear();
    for (const at::Tensor& input : inputs) {
      if (input.defined() && input.has_storage()) input_storages_.insert(input.storage().unsafeGetStorageImpl());
    }
    for (size_t i = 0; i < inputs.size(); ++i) Hold(step_.input_slots[i], inputs[i]);
    // Donated inputs are still protected: the caller may keep other references (a trainer's buffers).
    if (donated) inputs.clear();
    donated_ = donated;
    if (step_.rng_slot >= 0) MAGI_RETURN_IF_ERROR(SetGeneratorState(step_, slots_[step_.rng_slot]));

    handles_.clear();
    handles_.resize(step_.nodes.size());
    in_flight_.clear();
    torch::jit::Stack stack;
    if (profile_nodes_) {
      stats_.node_seconds.assign(step_.nodes.size(), 0.0);
      node_begin_.assign(step_.nodes.size(), {});
      node_end_.assign(step_.nodes.size(), {});
    }
    timed_collectives_.clear();
    auto node_start = std::chrono::steady_clock::now();
    for (size_t index = 0; index < step_.nodes.size(); ++index) {
      const NodePlan& plan = step_.nodes[index];
      switch (plan.kind) {
        case NodePlan::Kind::kCollectiveStart:
        case NodePlan::Kind::kWait:
          MAGI_RETURN_IF_ERROR(RunCommunication(index));
          break;
        case NodePlan::Kind::kCall:
          MAGI_RETURN_IF_ERROR(RunCall(plan));
          break;
        case NodePlan::Kind::kAdamW:
          MAGI_RETURN_IF_ERROR(RunAdamW(plan));
          break;
        case NodePlan::Kind::kLocalShard:
          MAGI_RETURN_IF_ERROR(RunLocalShard(plan));
          break;
        case NodePlan::Kind::kOp: {
          // In place (the KV cache's scatter) only over donated inputs, as for magi::adamw.
          absl::StatusOr<std::vector<at::Tensor>> results =
              writes_operands_[index]
                  ? CallOperator(plan, slots_, stack, [this](torch::jit::Stack& args) { ProtectInputs(args); })
                  : CallOperator(plan, slots_, stack, {}, /*in_place=*/donated_);
          if (!results.ok()) return results.status();
          MAGI_RETURN_IF_ERROR(TakeResults(plan, *results));
          break;
        }
      }
      for (int s : plan.release_slots) Release(s);
      ++stats_.nodes_run;
      if (profile_nodes_) {
        auto now = std::chrono::steady_clock::now();
        stats_.node_seconds[index] = std::chrono::duration<double>(now - node_start).count();
        node_begin_[index] = node_start;
        node_end_[index] = now;
        node_start = now;
      }
    }
    // A collective the communicator timed: its start holds how long it ran, its wait
    // nothing (as nccl_stream reports them), whatever the compute between the two. The
    // time this thread itself spent in the two nodes (issuing it; taking its results)
    // stays on the start too: the step paid it (0.5 ms of the tiny 2-rank CPU step).
    // That own time is each node's time outside [ready, visible], which the collective's
    // time already holds (so nothing is counted twice).
    for (const TimedCollective& timed : timed_collectives_) {
      auto own = [&](size_t node) {
        const auto overlap = std::min(node_end_[node], timed.visible) - std::max(node_begin_[node], timed.ready);
        const auto outside = (node_end_[node] - node_begin_[node]) - std::max(overlap, overlap.zero());
        return std::chrono::duration<double>(outside).count();
      };
      stats_.node_seconds[timed.start] =
          own(timed.start) + own(timed.wait) + std::chrono::duration<double>(timed.visible - timed.ready).count();
      stats_.node_seconds[timed.wait] = 0;
    }
    std::vector<at::Tensor> outputs;
    outputs.reserve(step_.output_slots.size());
    for (int s : step_.output_slots) outputs.push_back(slots_[s]);
    slots_.assign(step_.num_slots, at::Tensor());
    handles_.clear();
    stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return outputs;
  }

  InterpreterExecutable() = default;

  // An op that writes its operands (batch norm's running statistics, an in-place op in a
  // hand-written graph) gets copies of those that share memory with a bound input: the
  // caller's tensors are inputs, never outputs, and IR values do not change.
  void ProtectInputs(torch::jit::Stack& stack) const {
    auto shared = [&](const at::Tensor& t) {
      return t.defined() && t.has_storage() && input_storages_.contains(t.storage().unsafeGetStorageImpl());
    };
    for (c10::IValue& value : stack) {
      if (value.isTensor()) {
        if (shared(value.toTensor())) value = value.toTensor().clone();
      } else if (value.isTensorList()) {
        std::vector<at::Tensor> tensors = value.toTensorVector();
        bool any = false;
        for (at::Tensor& t : tensors) {
          if (shared(t)) {
            t = t.clone();
            any = true;
          }
        }
        if (any) value = c10::IValue(c10::List<at::Tensor>(tensors));
      }
    }
  }

  std::vector<at::Tensor> Operands(const NodePlan& plan) const {
    std::vector<at::Tensor> operands;
    for (int s : plan.args[0].slots) operands.push_back(slots_[s]);
    return operands;
  }

  absl::Status RunCall(const NodePlan& plan) {
    TorchExecutable& callee = *callees_.at(plan.callee);
    absl::StatusOr<std::vector<at::Tensor>> results = callee.Run(Operands(plan));
    if (!results.ok()) {
      return absl::Status(results.status().code(), absl::StrCat(Where(*plan.node), ": ", results.status().message()));
    }
    // While it ran, the partition held its inner buffers and results on top of what this
    // run holds (its operands included).
    AddTransientBytes(std::max<int64_t>(0, callee.last_run_stats().peak_allocated_bytes));
    return TakeResults(plan, *results);
  }

  absl::Status RunAdamW(const NodePlan& plan) {
    std::vector<at::Tensor> o = Operands(plan);
    std::vector<at::Tensor> results;
    MAGI_RETURN_IF_ERROR(compat::CallTorchLazy([&] { return Where(*plan.node); }, [&] {
      // In place only over donated inputs: a caller of Run keeps its tensors unchanged.
      results = AdamWReferenceOf(plan.adamw_split, o, plan.adamw, donated_ ? plan.adamw_in_place : nullptr);
    }));
    return TakeResults(plan, results);
  }

  // This rank's piece, by its rank in the group's communicator (bound: checked at the start).
  absl::Status RunLocalShard(const NodePlan& plan) {
    const Communicator& communicator = *communicators_.at(plan.group);
    at::Tensor piece;
    MAGI_RETURN_IF_ERROR(compat::CallTorchLazy([&] { return Where(*plan.node); }, [&] {
      piece = LocalShardOf(slots_[plan.args[0].slots[0]], communicator.rank(), communicator.size());
    }));
    return TakeResults(plan, {piece});
  }

  absl::Status RunCommunication(size_t index) {
    const NodePlan& plan = step_.nodes[index];
    if (plan.kind == NodePlan::Kind::kCollectiveStart) {
      std::vector<at::Tensor> inputs = Operands(plan);
      absl::StatusOr<std::unique_ptr<CollectiveHandle>> handle =
          communicators_.at(plan.group)->Start(plan.collective, inputs, plan.reduce_op);
      if (!handle.ok())
        return absl::Status(handle.status().code(), absl::StrCat(Where(*plan.node), ": ", handle.status().message()));
      handles_[index] = *std::move(handle);
      // In flight, a collective holds its inputs and the result buffers it allocated:
      // count both until the wait, as the memory planner does.
      InFlight& in_flight = in_flight_[index];
      in_flight.inputs = std::move(inputs);
      for (const at::Tensor& input : in_flight.inputs) AddStorageRef(input);
      for (const TensorType& type : plan.result_types) in_flight.result_bytes += type.SizeInBytes().value_or(0);
      AddLiveBytes(in_flight.result_bytes, /*allocated=*/true);
      return absl::OkStatus();
    }
    std::unique_ptr<CollectiveHandle>& handle = handles_[plan.start_plan];
    if (handle == nullptr) return absl::InternalError(absl::StrCat(Where(*plan.node), ": its start did not run"));
    const std::chrono::steady_clock::time_point wait_called = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<at::Tensor>> results = handle->Wait();
    auto in_flight = in_flight_.find(plan.start_plan);
    if (profile_nodes_ && results.ok()) {
      if (std::optional<CollectiveTiming> timing = handle->timing()) {
        // The results reached this thread when they were done, or, where this wait
        // blocked, when it returned (the waking up is part of what a step pays).
        const bool blocked = timing->done > wait_called;
        const std::chrono::steady_clock::time_point visible = blocked ? std::chrono::steady_clock::now() : timing->done;
        timed_collectives_.push_back({static_cast<size_t>(plan.start_plan), index, timing->ready, visible});
      }
    }
    handle.reset();
    if (in_flight != in_flight_.end()) {
      for (const at::Tensor& input : in_flight->second.inputs) DropStorageRef(input);
      live_bytes_ -= in_flight->second.result_bytes;
      allocated_bytes_ -= in_flight->second.result_bytes;
      in_flight_.erase(in_flight);
    }
    if (!results.ok()) {
      return absl::Status(results.status().code(), absl::StrCat(Where(*plan.node), ": ", results.status().message()));
    }
    return TakeResults(plan, *results);
  }

  absl::Status TakeResults(const NodePlan& plan, const std::vector<at::Tensor>& tensors) {
    MAGI_RETURN_IF_ERROR(CheckResults(plan, tensors));
    for (size_t i = 0; i < tensors.size(); ++i) Hold(plan.result_slots[i], tensors[i]);
    return absl::OkStatus();
  }

  void Hold(int slot, const at::Tensor& tensor) {
    Release(slot);
    slots_[slot] = tensor;
    AddStorageRef(tensor);
  }

  void Release(int slot) {
    DropStorageRef(slots_[slot]);
    slots_[slot] = at::Tensor();
  }

  // Live bytes count each storage once, however many slots or in-flight collectives hold it.
  void AddStorageRef(const at::Tensor& tensor) {
    if (!tensor.defined() || !tensor.has_storage()) return;
    const c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
    if (storage_refs_[storage]++ == 0) {
      AddLiveBytes(static_cast<int64_t>(tensor.storage().nbytes()), /*allocated=*/!input_storages_.contains(storage));
    }
  }

  void DropStorageRef(const at::Tensor& tensor) {
    if (!tensor.defined() || !tensor.has_storage()) return;
    const c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
    auto it = storage_refs_.find(storage);
    if (it != storage_refs_.end() && --it->second == 0) {
      const int64_t bytes = static_cast<int64_t>(tensor.storage().nbytes());
      live_bytes_ -= bytes;
      if (!input_storages_.contains(storage)) allocated_bytes_ -= bytes;
      storage_refs_.erase(it);
    }
  }

  // `allocated`: storage this run made (not one of its inputs).
  void AddLiveBytes(int64_t bytes, bool allocated) {
    live_bytes_ += bytes;
    stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, live_bytes_);
    if (allocated) {
      allocated_bytes_ += bytes;
      stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, allocated_bytes_);
    }
  }

  // Bytes held for a moment on top of what is live (a callee's, while it runs).
  void AddTransientBytes(int64_t bytes) {
    stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, live_bytes_ + bytes);
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, allocated_bytes_ + bytes);
  }

  StepPlan step_;
  std::vector<bool> writes_operands_;  // per node: its op writes operands (op traits: side effects)
  absl::flat_hash_set<const c10::StorageImpl*> input_storages_;  // of this run's bound inputs
  absl::flat_hash_map<std::string, std::shared_ptr<TorchExecutable>> callees_;
  absl::flat_hash_map<std::string, std::shared_ptr<Communicator>> communicators_;
  std::vector<std::unique_ptr<CollectiveHandle>> handles_;
  struct TimedCollective {
    size_t start;  // node indices
    size_t wait;
    // From when it could start to when its results reached this thread.
    std::chrono::steady_clock::time_point ready, visible;
  };
  std::vector<TimedCollective> timed_collectives_;  // this run's, when profiling
  std::vector<std::chrono::steady_clock::time_point> node_begin_, node_end_;  // this run's, when profiling
  std::vector<at::Tensor> slots_;
  absl::flat_hash_map<const c10::StorageImpl*, int> storage_refs_;
  int64_t live_bytes_ = 0;
  int64_t allocated_bytes_ = 0;  // of live_bytes_, in storages this run made
  bool profile_nodes_ = false;
  bool donated_ = false;  // this run's inputs were handed over (RunDonating)
  struct InFlight {
    std::vector<at::Tensor> inputs;
    int64_t result_bytes = 0;
  };
  absl::flat_hash_map<size_t, InFlight> in_flight_;  // start plan index -> what it holds
  RunStats stats_;
};

}  // namespace

Capability InterpreterBackend::GetCapability(const Module& module, const Graph& graph) const {
  Capability capability;
  for (const Node* node : graph.nodes()) {
    std::string reason = WhyNotRunnable(*node);
    if (!reason.empty()) capability.unsupported.emplace_back(node, std::move(reason));
  }
  return capability;
}

absl::StatusOr<std::unique_ptr<Executable>> InterpreterBackend::Compile(const Module& module, const Graph& graph,
                                                                        const CompileContext& context) const {
  // ATen's kernels are the interpreter's: deterministic when ATen's deterministic
  // algorithms are on (an op without a deterministic kernel then fails naming itself).
  if (context.deterministic) MAGI_RETURN_IF_ERROR(compat::CheckDeterministicAlgorithms(name()));
  MAGI_ASSIGN_OR_RETURN(std::unique_ptr<InterpreterExecutable> exe, InterpreterExecutable::Build(graph, context));
  return std::unique_ptr<Executable>(std::move(exe));
}

MAGI_REGISTER(Backend, "interpreter", [](const ComponentOptions& options) -> absl::StatusOr<std::unique_ptr<Backend>> {
  if (!options.empty()) return absl::InvalidArgumentError("the interpreter takes no options");
  return std::make_unique<InterpreterBackend>();
});

}  // namespace magi
