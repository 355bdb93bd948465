#include "magi/backend/interpreter/interpreter.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <chrono>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "magi/base/status_macros.h"
#include "magi/compat/torch_compat.h"
#include "magi/ir/collectives.h"
#include "magi/registry/registry.h"
#include "magi/runtime/torch_executable.h"

namespace magi {
namespace {

// How to produce one schema argument at run time.
struct ArgPlan {
  enum class Source { kConstant, kOperand, kOperandList, kOptionalOperandList } source = Source::kConstant;
  c10::IValue constant;
  std::vector<int> slots;  // value slots; -1 for a none entry
};

struct NodePlan {
  enum class Kind { kOp, kCollectiveStart, kWait } kind = Kind::kOp;
  const Node* node = nullptr;
  c10::optional<c10::OperatorHandle> op;  // kOp only
  CollectiveKind collective = CollectiveKind::kAllGather;
  std::string group;
  std::string reduce_op;
  int start_plan = -1;  // kWait: the plan index of its start
  std::vector<ArgPlan> args;
  std::vector<int> result_slots;
  std::vector<TensorType> result_types;
  std::vector<int> release_slots;  // slots whose last use is this node
  explicit NodePlan(const Node* n) : node(n) {}
};

std::string Where(const Node& node) { return absl::StrCat("graph @", node.graph()->name(), ": ", node.DebugName()); }

absl::StatusOr<c10::OperatorHandle> FindOp(const Node& node) {
  std::vector<std::string> parts = absl::StrSplit(node.op(), absl::MaxSplits('.', 1));
  std::string overload = parts.size() > 1 ? parts[1] : "";
  c10::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findSchema({parts[0], overload});
  if (!op) return absl::NotFoundError(absl::StrCat(Where(node), ": LibTorch has no operator ", node.op()));
  return *op;
}

// The IValue for a constant attribute passed as an argument of `type`.
absl::StatusOr<c10::IValue> ConstantIValue(const Attribute& value, const compat::ArgType& type) {
  // An undefined tensor passed where the schema wants a (non-optional) Tensor.
  if (value.is_none() && type.kind == compat::ArgKind::kTensor && !type.optional) return c10::IValue(at::Tensor());
  if (value.is_none()) return c10::IValue();
  switch (value.kind()) {
    case AttrKind::kBool:
      return c10::IValue(value.as_bool());
    case AttrKind::kInt:
      if (type.kind == compat::ArgKind::kFloat) return c10::IValue(static_cast<double>(value.as_int()));
      return c10::IValue(value.as_int());
    case AttrKind::kFloat:
      return c10::IValue(value.as_float());
    case AttrKind::kString:
      return c10::IValue(value.as_string());
    case AttrKind::kIntList:
      if (type.kind == compat::ArgKind::kFloatList) {
        std::vector<double> floats(value.as_int_list().begin(), value.as_int_list().end());
        return c10::IValue(floats);
      }
      if (type.kind == compat::ArgKind::kTensorList || type.kind == compat::ArgKind::kOptionalTensorList) {
        if (!value.as_int_list().empty()) break;
        if (type.kind == compat::ArgKind::kTensorList) return c10::IValue(std::vector<at::Tensor>());
        return c10::IValue(c10::List<c10::optional<at::Tensor>>());
      }
      if (type.kind == compat::ArgKind::kBoolList && value.as_int_list().empty()) {
        return c10::IValue(c10::List<bool>());
      }
      return c10::IValue(value.as_int_list());
    case AttrKind::kFloatList:
      return c10::IValue(value.as_float_list());
    case AttrKind::kBoolList: {
      c10::List<bool> list;
      for (bool b : value.as_bool_list()) list.push_back(b);
      return c10::IValue(list);
    }
    case AttrKind::kDType:
      return c10::IValue(compat::ToScalarType(value.as_dtype()));
    case AttrKind::kDevice:
      return c10::IValue(compat::ToTorchDevice(value.as_device()));
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("a ", AttrKindName(value.kind()), " cannot be passed as ", "an argument of this type"));
}

class InterpreterExecutable : public TorchExecutable {
 public:
  absl::string_view backend_name() const override { return "interpreter"; }
  const RunStats& last_run_stats() const override { return stats_; }

  static absl::StatusOr<std::unique_ptr<InterpreterExecutable>> Build(const Graph& graph) {
    auto exe = std::unique_ptr<InterpreterExecutable>(new InterpreterExecutable());
    absl::flat_hash_map<const Value*, int> slot_of;
    std::function<int(const Value*)> slot = [&](const Value* v) {
      auto [it, inserted] = slot_of.emplace(v, static_cast<int>(slot_of.size()));
      return it->second;
    };
    for (const Value* input : graph.inputs()) {
      int s = slot(input);
      exe->input_slots_.push_back(s);
      if (input->role() == InputRole::kRng) exe->rng_slot_ = s;
    }
    std::vector<Node*> nodes = graph.nodes();
    absl::flat_hash_map<const Node*, int> plan_of_start;
    for (const Node* node : nodes) {
      if (IsCommunication(node->op())) {
        MAGI_ASSIGN_OR_RETURN(NodePlan plan, PlanCommunication(*node, plan_of_start, slot));
        if (plan.kind == NodePlan::Kind::kCollectiveStart) {
          plan_of_start[node] = static_cast<int>(exe->plans_.size());
          exe->groups_.insert(plan.group);
        }
        exe->plans_.push_back(std::move(plan));
        continue;
      }
      MAGI_ASSIGN_OR_RETURN(c10::OperatorHandle op, FindOp(*node));
      NodePlan plan(node);
      plan.op = op;
      const c10::FunctionSchema& schema = op.schema();
      const std::vector<Argument>& args = node->args();
      if (args.size() > schema.arguments().size()) {
        return absl::InvalidArgumentError(absl::StrCat(Where(*node), ": ", args.size(), " arguments, but ", node->op(),
                                                       " takes ", schema.arguments().size()));
      }
      for (size_t i = 0; i < schema.arguments().size(); ++i) {
        const c10::Argument& argument = schema.arguments()[i];
        compat::ArgType type = compat::ClassifyArgument(argument);
        ArgPlan arg;
        if (i >= args.size()) {
          // Trailing arguments the IR left out take the schema's defaults.
          if (!argument.default_value()) {
            return absl::InvalidArgumentError(
                absl::StrCat(Where(*node), ": argument '", argument.name(), "' is missing and has no default"));
          }
          arg.constant = *argument.default_value();
        } else if (args[i].value.kind() == AttrKind::kOperand) {
          arg.source = ArgPlan::Source::kOperand;
          arg.slots.push_back(slot(node->operand(args[i].value.as_operand().index)));
        } else if (args[i].value.kind() == AttrKind::kOperandList) {
          arg.source = type.kind == compat::ArgKind::kOptionalTensorList ? ArgPlan::Source::kOptionalOperandList
                                                                         : ArgPlan::Source::kOperandList;
          for (int index : args[i].value.as_operand_list().indices) {
            if (index == OperandListRef::kNoOperand) {
              if (arg.source != ArgPlan::Source::kOptionalOperandList) {
                return absl::InvalidArgumentError(
                    absl::StrCat(Where(*node), ": argument '", argument.name(), "' cannot hold none"));
              }
              arg.slots.push_back(-1);
            } else {
              arg.slots.push_back(slot(node->operand(index)));
            }
          }
        } else {
          absl::StatusOr<c10::IValue> constant = ConstantIValue(args[i].value, type);
          if (!constant.ok()) {
            return absl::InvalidArgumentError(
                absl::StrCat(Where(*node), ": argument '", argument.name(), "': ", constant.status().message()));
          }
          arg.constant = *std::move(constant);
        }
        plan.args.push_back(std::move(arg));
      }
      for (const Value* result : node->results()) {
        plan.result_slots.push_back(slot(result));
        plan.result_types.push_back(result->type().tensor());
      }
      exe->plans_.push_back(std::move(plan));
    }
    for (const GraphOutput& output : graph.outputs()) exe->output_slots_.push_back(slot(output.value));
    exe->num_slots_ = static_cast<int>(slot_of.size());

    // Free each value after its last use (never graph outputs; inputs belong to the caller
    // but the executable's reference is dropped too).
    std::vector<int> last_use(exe->num_slots_, -1);
    for (size_t n = 0; n < exe->plans_.size(); ++n) {
      for (const ArgPlan& arg : exe->plans_[n].args) {
        for (int s : arg.slots) {
          if (s >= 0) last_use[s] = static_cast<int>(n);
        }
      }
    }
    std::vector<bool> is_output(exe->num_slots_, false);
    for (int s : exe->output_slots_) is_output[s] = true;
    for (int s = 0; s < exe->num_slots_; ++s) {
      if (last_use[s] >= 0 && !is_output[s]) exe->plans_[last_use[s]].release_slots.push_back(s);
    }
    // Results nobody uses are dropped as soon as they are made.
    for (size_t n = 0; n < exe->plans_.size(); ++n) {
      for (int s : exe->plans_[n].result_slots) {
        if (last_use[s] < 0 && !is_output[s]) exe->plans_[n].release_slots.push_back(s);
      }
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
    for (const std::string& group : groups_) {
      if (!communicators_.contains(group)) {
        return absl::FailedPreconditionError(
            absl::StrCat("the graph has collectives on process group '", group, "' but no communicator is bound"));
      }
    }
    auto start = std::chrono::steady_clock::now();
    if (inputs.size() != input_slots_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the graph takes ", input_slots_.size(), " inputs, ", inputs.size(), " were given"));
    }
    stats_ = RunStats();
    live_bytes_ = 0;
    storage_refs_.clear();
    slots_.assign(num_slots_, at::Tensor());
    for (size_t i = 0; i < inputs.size(); ++i) Hold(input_slots_[i], inputs[i]);
    if (rng_slot_ >= 0) MAGI_RETURN_IF_ERROR(SetGeneratorState(slots_[rng_slot_]));

    handles_.clear();
    handles_.resize(plans_.size());
    in_flight_.clear();
    torch::jit::Stack stack;
    if (profile_nodes_) stats_.node_seconds.assign(plans_.size(), 0.0);
    auto node_start = std::chrono::steady_clock::now();
    auto record_time = [&](size_t index) {
      if (!profile_nodes_) return;
      auto now = std::chrono::steady_clock::now();
      stats_.node_seconds[index] = std::chrono::duration<double>(now - node_start).count();
      node_start = now;
    };
    for (size_t index = 0; index < plans_.size(); ++index) {
      const NodePlan& plan = plans_[index];
      if (plan.kind != NodePlan::Kind::kOp) {
        MAGI_RETURN_IF_ERROR(RunCommunication(index));
        for (int s : plan.release_slots) Release(s);
        ++stats_.nodes_run;
        record_time(index);
        continue;
      }
      stack.clear();
      for (const ArgPlan& arg : plan.args) {
        switch (arg.source) {
          case ArgPlan::Source::kConstant:
            stack.push_back(arg.constant);
            break;
          case ArgPlan::Source::kOperand:
            stack.emplace_back(slots_[arg.slots[0]]);
            break;
          case ArgPlan::Source::kOperandList: {
            std::vector<at::Tensor> list;
            for (int s : arg.slots) list.push_back(slots_[s]);
            stack.emplace_back(std::move(list));
            break;
          }
          case ArgPlan::Source::kOptionalOperandList: {
            c10::List<c10::optional<at::Tensor>> list;
            for (int s : arg.slots) list.push_back(s < 0 ? c10::optional<at::Tensor>() : slots_[s]);
            stack.emplace_back(std::move(list));
            break;
          }
        }
      }
      try {
        plan.op->callBoxed(&stack);
      } catch (const c10::Error& error) {
        return absl::InternalError(absl::StrCat(Where(*plan.node), ": ", error.what_without_backtrace()));
      } catch (const std::exception& error) {
        return absl::InternalError(absl::StrCat(Where(*plan.node), ": ", error.what()));
      }
      MAGI_RETURN_IF_ERROR(TakeResults(plan, stack));
      for (int s : plan.release_slots) Release(s);
      ++stats_.nodes_run;
      record_time(index);
    }
    std::vector<at::Tensor> outputs;
    outputs.reserve(output_slots_.size());
    for (int s : output_slots_) outputs.push_back(slots_[s]);
    slots_.assign(num_slots_, at::Tensor());
    handles_.clear();
    stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return outputs;
  }

 private:
  InterpreterExecutable() = default;

  static absl::StatusOr<NodePlan> PlanCommunication(const Node& node,
                                                    const absl::flat_hash_map<const Node*, int>& plan_of_start,
                                                    const std::function<int(const Value*)>& slot) {
    NodePlan plan(&node);
    if (node.op() == kWaitOp) {
      plan.kind = NodePlan::Kind::kWait;
      const Node* start = StartOfWait(node);
      auto it = start == nullptr ? plan_of_start.end() : plan_of_start.find(start);
      if (it == plan_of_start.end()) {
        return absl::InvalidArgumentError(absl::StrCat(Where(node), ": waits on no earlier collective start"));
      }
      plan.start_plan = it->second;
    } else {
      plan.kind = NodePlan::Kind::kCollectiveStart;
      plan.collective = *GetCollectiveKind(node.op());
      const Attribute* group = node.FindArg("group");
      const Attribute* reduce_op = node.FindArg("reduce_op");
      if (group == nullptr || group->kind() != AttrKind::kString) {
        return absl::InvalidArgumentError(absl::StrCat(Where(node), ": no group"));
      }
      plan.group = group->as_string();
      plan.reduce_op = reduce_op != nullptr && reduce_op->kind() == AttrKind::kString ? reduce_op->as_string() : "sum";
      ArgPlan inputs;
      inputs.source = ArgPlan::Source::kOperandList;
      for (const Value* operand : node.operands()) inputs.slots.push_back(slot(operand));
      plan.args.push_back(std::move(inputs));
    }
    for (const Value* result : node.results()) {
      plan.result_slots.push_back(slot(result));
      plan.result_types.push_back(result->type().tensor());
    }
    return plan;
  }

  absl::Status RunCommunication(size_t index) {
    const NodePlan& plan = plans_[index];
    if (plan.kind == NodePlan::Kind::kCollectiveStart) {
      std::vector<at::Tensor> inputs;
      for (int s : plan.args[0].slots) inputs.push_back(slots_[s]);
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
      AddLiveBytes(in_flight.result_bytes);
      return absl::OkStatus();
    }
    std::unique_ptr<CollectiveHandle>& handle = handles_[plan.start_plan];
    if (handle == nullptr) return absl::InternalError(absl::StrCat(Where(*plan.node), ": its start did not run"));
    absl::StatusOr<std::vector<at::Tensor>> results = handle->Wait();
    handle.reset();
    auto in_flight = in_flight_.find(plan.start_plan);
    if (in_flight != in_flight_.end()) {
      for (const at::Tensor& input : in_flight->second.inputs) DropStorageRef(input);
      live_bytes_ -= in_flight->second.result_bytes;
      in_flight_.erase(in_flight);
    }
    if (!results.ok()) {
      return absl::Status(results.status().code(), absl::StrCat(Where(*plan.node), ": ", results.status().message()));
    }
    torch::jit::Stack stack;
    for (at::Tensor& t : *results) stack.emplace_back(std::move(t));
    return TakeResults(plan, stack);
  }

  absl::Status TakeResults(const NodePlan& plan, torch::jit::Stack& stack) {
    // Results are the defined tensors among the returns, in order (as capture records them).
    std::vector<at::Tensor> tensors;
    for (c10::IValue& value : stack) {
      if (value.isTensor()) {
        if (value.toTensor().defined()) tensors.push_back(value.toTensor());
      } else if (value.isTensorList()) {
        for (const at::Tensor& t : value.toTensorVector()) {
          if (t.defined()) tensors.push_back(t);
        }
      }
    }
    if (tensors.size() != plan.result_slots.size()) {
      return absl::InternalError(absl::StrCat(Where(*plan.node), ": produced ", tensors.size(),
                                              " tensors, the IR expects ", plan.result_slots.size()));
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorType& expected = plan.result_types[i];
      const at::Tensor& t = tensors[i];
      if (t.scalar_type() != compat::ToScalarType(expected.dtype) ||
          !std::equal(t.sizes().begin(), t.sizes().end(), expected.sizes.begin(), expected.sizes.end())) {
        absl::StatusOr<TensorType> actual = compat::TensorTypeOf(t);
        return absl::InternalError(absl::StrCat(Where(*plan.node), ": produced ",
                                                actual.ok() ? actual->ToString() : t.toString(), ", the IR says ",
                                                expected.ToString()));
      }
      Hold(plan.result_slots[i], t);
    }
    return absl::OkStatus();
  }

  absl::Status SetGeneratorState(const at::Tensor& state) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    for (const NodePlan& plan : plans_) {
      if (!plan.result_types.empty() && plan.result_types[0].device.type == DeviceType::kCuda) {
        generator = at::globalContext().defaultGenerator(compat::ToTorchDevice(plan.result_types[0].device));
        break;
      }
    }
    try {
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(state);
    } catch (const c10::Error& error) {
      return absl::InvalidArgumentError(absl::StrCat("rng.state: ", error.what_without_backtrace()));
    }
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
    if (storage_refs_[tensor.storage().unsafeGetStorageImpl()]++ == 0) {
      AddLiveBytes(static_cast<int64_t>(tensor.storage().nbytes()));
    }
  }

  void DropStorageRef(const at::Tensor& tensor) {
    if (!tensor.defined() || !tensor.has_storage()) return;
    auto it = storage_refs_.find(tensor.storage().unsafeGetStorageImpl());
    if (it != storage_refs_.end() && --it->second == 0) {
      live_bytes_ -= static_cast<int64_t>(tensor.storage().nbytes());
      storage_refs_.erase(it);
    }
  }

  void AddLiveBytes(int64_t bytes) {
    live_bytes_ += bytes;
    stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, live_bytes_);
  }

  std::vector<NodePlan> plans_;
  absl::flat_hash_set<std::string> groups_;
  absl::flat_hash_map<std::string, std::shared_ptr<Communicator>> communicators_;
  std::vector<std::unique_ptr<CollectiveHandle>> handles_;
  std::vector<int> input_slots_;
  std::vector<int> output_slots_;
  int rng_slot_ = -1;
  int num_slots_ = 0;
  std::vector<at::Tensor> slots_;
  absl::flat_hash_map<const c10::StorageImpl*, int> storage_refs_;
  int64_t live_bytes_ = 0;
  bool profile_nodes_ = false;
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
    if (IsCommunication(node->op())) continue;  // run through the bound communicators
    if (!FindOp(*node).ok()) {
      capability.unsupported.emplace_back(node, "LibTorch has no such operator");
    }
  }
  return capability;
}

absl::StatusOr<std::unique_ptr<Executable>> InterpreterBackend::Compile(const Module& module,
                                                                        const Graph& graph) const {
  MAGI_ASSIGN_OR_RETURN(std::unique_ptr<InterpreterExecutable> exe, InterpreterExecutable::Build(graph));
  return std::unique_ptr<Executable>(std::move(exe));
}

MAGI_REGISTER(Backend, "interpreter", [](const ComponentOptions& options) -> absl::StatusOr<std::unique_ptr<Backend>> {
  if (!options.empty()) return absl::InvalidArgumentError("the interpreter takes no options");
  return std::make_unique<InterpreterBackend>();
});

}  // namespace magi
