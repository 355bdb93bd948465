#include "magi/passes/fsdp/shard_for_fsdp.h"

#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"
#include "magi/ir/collectives.h"
#include "magi/ir/magi_ops.h"
#include "magi/passes/reshard_after_forward.h"

namespace magi {
namespace {

// Builds nodes at one insertion point with shared annotations.
class Builder {
 public:
  Builder(Graph& graph, Node* before, std::string module_path, Phase phase)
      : graph_(graph), before_(before), module_path_(std::move(module_path)), phase_(phase) {}

  Value* Add(const std::string& op, std::vector<NodeArg> args, TensorType type, const std::string& name) {
    Node* node =
        graph_.AddNode(op, std::move(args), {Type::Tensor(std::move(type))}, before_, {graph_.FreshName(name)});
    Annotate(node);
    return node->result(0);
  }

  Value* Cast(Value* value, DType dtype) { return Convert(value, dtype, value->type().tensor().device, false); }

  // `value` as `dtype` on `device`: one aten::_to_copy (a cast and a transfer at once),
  // or `value` itself when neither changes, unless `always` (CPU offload copies even where
  // host and device are one, so the graph is the one a GPU runs). Transfers are blocking
  // (non_blocking = false): the host reads what a device-to-host copy wrote right away.
  Value* Convert(Value* value, DType dtype, const Device& device, bool always) {
    const TensorType& from = value->type().tensor();
    const bool moves = from.device != device;
    if (from.dtype == dtype && !moves && !always) return value;
    TensorType type = from;
    type.dtype = dtype;
    type.device = device;
    type.strides.clear();
    Attribute dtype_arg = from.dtype == dtype ? Attribute(NoneAttr{}) : Attribute(dtype);
    Attribute device_arg = moves ? Attribute(device) : Attribute(NoneAttr{});
    return Add("aten::_to_copy",
               {NodeArg(value), NodeArg(std::move(dtype_arg), "dtype"), NodeArg(Attribute(NoneAttr{}), "layout"),
                NodeArg(std::move(device_arg), "device"), NodeArg(Attribute(NoneAttr{}), "pin_memory"),
                NodeArg(Attribute(false), "non_blocking"), NodeArg(Attribute(NoneAttr{}), "memory_format")},
               std::move(type), value->name() + (moves || always ? ".to_device." : ".cast."));
  }

  void Annotate(Node* node) {
    node->mutable_annotations().module_path = module_path_;
    node->mutable_annotations().phase = phase_;
  }

  Node* before() const { return before_; }

 private:
  Graph& graph_;
  Node* before_;
  std::string module_path_;
  Phase phase_;
};

TensorType WithDim0(TensorType type, int64_t dim0) {
  type.sizes[0] = dim0;
  type.strides.clear();
  return type;
}

struct Gathered {
  Node* wait = nullptr;      // its results: the gathered (padded) tensors
  std::vector<Value*> full;  // each sliced back to its parameter's dim 0
};

// All-gathers `operands` (one bucket) over `group` and slices each result back to its
// parameter's dim 0.
absl::StatusOr<Gathered> GatherAndSlice(Graph& graph, const ProcessGroup& group, Builder& b,
                                        const std::vector<Value*>& operands, const std::vector<Value*>& params) {
  MAGI_ASSIGN_OR_RETURN(Node * start,
                        AddCollectiveStart(graph, CollectiveKind::kAllGather, operands, group, "sum", b.before()));
  b.Annotate(start);
  Gathered gathered;
  gathered.wait = AddWait(graph, start, b.before());
  b.Annotate(gathered.wait);
  for (size_t i = 0; i < params.size(); ++i) {
    Value* result = gathered.wait->result(static_cast<int>(i));
    int64_t dim0 = params[i]->type().tensor().sizes[0];
    if (result->type().tensor().sizes[0] == dim0) {
      gathered.full.push_back(result);
      continue;
    }
    TensorType type = WithDim0(result->type().tensor(), dim0);
    gathered.full.push_back(b.Add("aten::slice.Tensor",
                                  {NodeArg(result), NodeArg(Attribute(int64_t{0})), NodeArg(Attribute(int64_t{0})),
                                   NodeArg(Attribute(dim0)), NodeArg(Attribute(int64_t{1}))},
                                  type, params[i]->name() + ".full."));
  }
  return gathered;
}

// All-gathers the shards of `params` over `group`, each first cast to its parameter's
// dtype and (CPU offload: `offload`) copied from the host to the parameter's device.
absl::StatusOr<Gathered> GatherGroup(Graph& graph, const ProcessGroup& group, Builder& b,
                                     const std::vector<Value*>& shards, const std::vector<Value*>& params,
                                     bool offload) {
  std::vector<Value*> to_gather;
  for (size_t i = 0; i < shards.size(); ++i) {
    const TensorType& param = params[i]->type().tensor();
    to_gather.push_back(b.Convert(shards[i], param.dtype, param.device, offload));
  }
  return GatherAndSlice(graph, group, b, to_gather, params);
}

// A parameter's update, emitted after every group is reduced (clipping needs them all).
struct PendingUpdate {
  std::string name;
  std::string group;  // module path of its FSDP group
  Value* shard = nullptr;
  Value* grad_shard = nullptr;  // null: no gradient
};

Value* Scalar0d(Builder& b, const Device& device, const std::string& op, std::vector<NodeArg> args,
               const std::string& name) {
  TensorType type{DType::kFloat32, {}};
  type.device = device;
  return b.Add(op, std::move(args), std::move(type), name);
}

// torch.nn.utils.clip_grad_norm_ over the full gradient, whose shards (zero padding rows
// included, which add nothing) are spread over `group`: returns the total norm and
// scales every gradient shard by min(1, max_norm / (norm + 1e-6)), the ops LibTorch's
// clip_grad_norm_ runs.
// With CPU offload (`device`: the device the communicator takes tensors on) the shards
// are on the host: the local sum goes to the device for the all-reduce and back. The
// scalars live where the shards do.
absl::StatusOr<Value*> ClipGradNorm(Graph& graph, const ProcessGroup& group, double max_norm,
                                    std::vector<PendingUpdate>& updates, const std::optional<Device>& device) {
  Builder b(graph, nullptr, "", Phase::kOptimizer);
  std::vector<Value*> squares;
  Device host;  // where the gradient shards are (the host with CPU offload)
  for (const PendingUpdate& update : updates) {
    if (update.grad_shard == nullptr) continue;
    host = update.grad_shard->type().tensor().device;
    if (update.grad_shard->type().tensor().dtype != DType::kFloat32) {
      return absl::UnimplementedError(absl::StrCat("clipping needs f32 gradient shards; ", update.name, " has ",
                                                   update.grad_shard->type().tensor().ToString()));
    }
    Value* squared = b.Add("aten::mul.Tensor", {NodeArg(update.grad_shard), NodeArg(update.grad_shard)},
                           WithDim0(update.grad_shard->type().tensor(), update.grad_shard->type().tensor().sizes[0]),
                           update.name + ".grad.sq.");
    squares.push_back(Scalar0d(b, host, "aten::sum", {NodeArg(squared), NodeArg(Attribute(NoneAttr{}))},
                               update.name + ".grad.sumsq."));
  }
  if (squares.empty()) return absl::InvalidArgumentError("clip_grad_norm: the step has no gradients");
  TensorType stacked_type{DType::kFloat32, {static_cast<int64_t>(squares.size())}};
  stacked_type.device = host;
  Value* stacked = b.Add("aten::stack", {NodeArg(squares), NodeArg(Attribute(int64_t{0}))}, stacked_type,
                         "grad_norm.parts.");
  Value* local = Scalar0d(b, host, "aten::sum", {NodeArg(stacked), NodeArg(Attribute(NoneAttr{}))},
                          "grad_norm.local_sq.");
  if (device) local = b.Convert(local, DType::kFloat32, *device, /*always=*/true);
  MAGI_ASSIGN_OR_RETURN(Node * start,
                        AddCollectiveStart(graph, CollectiveKind::kAllReduce, {local}, group, "sum", nullptr));
  b.Annotate(start);
  Node* wait = AddWait(graph, start, nullptr);
  b.Annotate(wait);
  Value* total = wait->result(0);
  if (device) total = b.Convert(total, DType::kFloat32, host, /*always=*/true);
  Value* norm = Scalar0d(b, host, "aten::sqrt", {NodeArg(total)}, "grad_norm.");
  Value* shifted =
      Scalar0d(b, host, "aten::add.Scalar", {NodeArg(norm), NodeArg(Attribute(1e-6)), NodeArg(Attribute(int64_t{1}))},
               "grad_norm.eps.");
  Value* inverse = Scalar0d(b, host, "aten::reciprocal", {NodeArg(shifted)}, "clip.inverse.");
  Value* coef = Scalar0d(b, host, "aten::mul.Scalar", {NodeArg(inverse), NodeArg(Attribute(max_norm))}, "clip.coef.");
  Value* clamped = Scalar0d(b, host, "aten::clamp",
                            {NodeArg(coef), NodeArg(Attribute(NoneAttr{})), NodeArg(Attribute(1.0))},
                            "clip.coef.clamped.");
  for (PendingUpdate& update : updates) {
    if (update.grad_shard == nullptr) continue;
    update.grad_shard = b.Add("aten::mul.Tensor", {NodeArg(update.grad_shard), NodeArg(clamped)},
                              WithDim0(update.grad_shard->type().tensor(), update.grad_shard->type().tensor().sizes[0]),
                              update.name + ".grad.clipped.");
  }
  return norm;
}

absl::Status CheckPostForwardSize(const FsdpGroupPlan& g, int64_t world) {
  if (g.post_forward_size == 0) return absl::OkStatus();
  const std::string where = absl::StrCat("FSDP group '", g.name.empty() ? "root" : g.name, "': ");
  if (!g.reshard_after_forward) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "post_forward_size ", g.post_forward_size, " needs reshard_after_forward"));
  }
  if (g.post_forward_size <= 1 || g.post_forward_size >= world || world % g.post_forward_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "reshard_after_forward=", g.post_forward_size, " must divide the shard group's ", world,
        " ranks and be neither 1 nor ", world, " (a smaller group to reshard to; true or false otherwise)"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string PostForwardGroupName(const std::string& shard_group, int64_t size) {
  return absl::StrCat(shard_group, ".post_forward", size);
}

absl::Status ShardForFsdp(Module& module, Graph& graph, const FsdpPlan& plan) {
  if (plan.world_size < 1) return absl::InvalidArgumentError("world_size must be >= 1");
  if (plan.replicate_size < 1) return absl::InvalidArgumentError("replicate_size must be >= 1");
  if (plan.gradient_divisor < 1) return absl::InvalidArgumentError("gradient_divisor must be >= 1");
  if (plan.clip_grad_norm < 0) return absl::InvalidArgumentError("clip_grad_norm must be >= 0");
  if (plan.clip_grad_norm > 0 && (!plan.optimizer || !plan.gradient_sync)) {
    return absl::InvalidArgumentError("clip_grad_norm clips before the optimizer: it needs optimizer and gradient_sync");
  }
  auto find_or_add_group = [&](const std::string& name, const std::string& axis,
                               int64_t size) -> absl::StatusOr<const ProcessGroup*> {
    const ProcessGroup* found = module.FindProcessGroup(name);
    if (found == nullptr) return module.AddProcessGroup({name, axis, size, {}});
    if (found->size != size) {
      return absl::InvalidArgumentError(
          absl::StrCat("process group @", found->name, " has size ", found->size, ", the plan says ", size));
    }
    return found;
  };
  MAGI_ASSIGN_OR_RETURN(const ProcessGroup* group,
                        find_or_add_group(plan.process_group, plan.mesh_axis, plan.world_size));
  const ProcessGroup* replicate = nullptr;
  if (plan.replicate_size > 1) {
    if (plan.replicate_group == plan.process_group) {
      return absl::InvalidArgumentError(absl::StrCat("the replicate and shard groups are both @", plan.process_group));
    }
    MAGI_ASSIGN_OR_RETURN(replicate, find_or_add_group(plan.replicate_group, plan.replicate_axis, plan.replicate_size));
  }
  const int64_t world = plan.world_size;
  const bool optimizer = plan.optimizer && plan.gradient_sync;
  const bool offload = plan.cpu_offload;
  const Device host{DeviceType::kCpu, -1};
  absl::flat_hash_set<std::string> planned;
  for (const FsdpGroupPlan& g : plan.groups) {
    MAGI_RETURN_IF_ERROR(CheckPostForwardSize(g, world));
    for (const std::string& name : g.params) {
      if (!planned.insert(name).second) {
        return absl::InvalidArgumentError(absl::StrCat("parameter ", name, " is in two FSDP groups"));
      }
    }
  }

  // Where the step computes (and the communicators take tensors): the parameters' device.
  Device compute_device;
  for (const Value* input : graph.inputs()) {
    if (input->role() == InputRole::kParam && input->type().is_tensor()) compute_device = input->type().tensor().device;
  }
  // Optimizer scalars, shared by every parameter.
  Value* decay = nullptr;
  Value* step_size = nullptr;
  Value* bc2_sqrt = nullptr;
  if (optimizer) {
    TensorType scalar{DType::kFloat32, {}};
    scalar.device = offload ? host : compute_device;  // where AdamW runs
    decay = graph.AddInput("adamw.decay", Type::Tensor(scalar), InputRole::kOptState);
    step_size = graph.AddInput("adamw.step_size", Type::Tensor(scalar), InputRole::kOptState);
    bc2_sqrt = graph.AddInput("adamw.bc2_sqrt", Type::Tensor(scalar), InputRole::kOptState);
  }
  std::vector<GraphOutput> new_outputs;
  std::vector<PendingUpdate> updates;
  // With donation, each new state output may reuse its old input's storage (in place).
  auto donated = [&](Value* input) { return plan.donate_state ? input : nullptr; };

  for (const FsdpGroupPlan& g : plan.groups) {
    if (g.params.empty()) continue;
    std::vector<Value*> params, shards;
    for (const std::string& name : g.params) {
      Value* param = graph.FindValue(name);
      if (param == nullptr || !param->is_graph_input() || param->role() != InputRole::kParam) {
        return absl::NotFoundError(absl::StrCat("FSDP group '", g.name, "': no parameter input %", name));
      }
      const TensorType& type = param->type().tensor();
      if (type.sizes.empty() || type.sizes[0] == kDynamicDim) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter ", name, " (", type.ToString(), ") has no static dim 0 to shard"));
      }
      if (graph.FindOutput(name) >= 0 || graph.FindOutput(name + ".updated") >= 0) {
        return absl::UnimplementedError(absl::StrCat("parameter ", name, " is written by the step itself"));
      }
      TensorType shard_type = WithDim0(type, ShardRows(type.sizes[0], world));
      if (plan.master_dtype) shard_type.dtype = *plan.master_dtype;
      if (offload) shard_type.device = host;
      params.push_back(param);
      shards.push_back(graph.AddInput(name + ".shard", Type::Tensor(shard_type), InputRole::kParam));
    }

    // Uses by phase; the first user of each phase is where its gather goes.
    absl::flat_hash_map<const Node*, int> position;
    std::vector<Node*> nodes = graph.nodes();
    for (int i = 0; i < static_cast<int>(nodes.size()); ++i) position[nodes[i]] = i;
    Node* first_forward = nullptr;
    Node* first_backward = nullptr;
    for (Value* param : params) {
      for (const Use& use : param->uses()) {
        Node*& first = use.user->annotations().phase == Phase::kBackward ? first_backward : first_forward;
        if (first == nullptr || position.at(use.user) < position.at(first)) first = use.user;
      }
    }
    std::vector<Value*> forward_full, backward_full;
    std::vector<Value*> pieces;  // reshard_after_forward=<int>: what each rank keeps after forward
    if (first_forward != nullptr) {
      Builder b(graph, first_forward, g.name, Phase::kForward);
      MAGI_ASSIGN_OR_RETURN(Gathered gathered, GatherGroup(graph, *group, b, shards, params, offload));
      forward_full = gathered.full;
      if (first_backward != nullptr && g.reshard_after_forward && g.post_forward_size > 0) {
        // Right after the gather: the piece lives from here to backward, the whole
        // gathered tensor only to its last forward use.
        MAGI_ASSIGN_OR_RETURN(const ProcessGroup* post_forward,
                              find_or_add_group(PostForwardGroupName(plan.process_group, g.post_forward_size),
                                                PostForwardGroupName(plan.mesh_axis, g.post_forward_size),
                                                g.post_forward_size));
        for (size_t i = 0; i < params.size(); ++i) {
          MAGI_ASSIGN_OR_RETURN(Node * piece, AddLocalShard(graph, gathered.wait->result(static_cast<int>(i)),
                                                            *post_forward, g.params[i] + ".post_forward.", b.before()));
          b.Annotate(piece);
          pieces.push_back(piece->result(0));
        }
      }
    }
    if (first_backward != nullptr) {
      Builder b(graph, first_backward, g.name, Phase::kBackward);
      if (!pieces.empty()) {  // backward gathers the pieces over the post-forward group only
        const ProcessGroup* post_forward =
            module.FindProcessGroup(PostForwardGroupName(plan.process_group, g.post_forward_size));
        MAGI_ASSIGN_OR_RETURN(Gathered gathered, GatherAndSlice(graph, *post_forward, b, pieces, params));
        backward_full = gathered.full;
      } else if (g.reshard_after_forward || forward_full.empty()) {
        MAGI_ASSIGN_OR_RETURN(Gathered gathered, GatherGroup(graph, *group, b, shards, params, offload));
        backward_full = gathered.full;
      } else {
        backward_full = forward_full;
      }
    }
    for (size_t i = 0; i < params.size(); ++i) {
      std::vector<Use> uses = params[i]->uses();
      for (const Use& use : uses) {
        bool backward = use.user->annotations().phase == Phase::kBackward;
        use.user->ReplaceOperand(use.operand_index, backward ? backward_full[i] : forward_full[i]);
      }
      graph.EraseInput(params[i]);
    }

    // Gradients: one reduce-scatter after the group's last gradient.
    std::vector<Value*> grads;
    Node* last_producer = nullptr;
    nodes = graph.nodes();
    for (int i = 0; i < static_cast<int>(nodes.size()); ++i) position[nodes[i]] = i;
    for (const std::string& name : g.params) {
      int index = graph.FindOutput(name + ".grad");
      Value* grad = index < 0 ? nullptr : graph.outputs()[index].value;
      grads.push_back(grad);
      if (grad != nullptr && grad->producer() != nullptr &&
          (last_producer == nullptr || position.at(grad->producer()) > position.at(last_producer))) {
        last_producer = grad->producer();
      }
    }
    std::vector<Value*> grad_shards(params.size(), nullptr);
    if (last_producer != nullptr) {
      Node* after = nullptr;  // insert before the node following the last producer
      int next = position.at(last_producer) + 1;
      if (next < static_cast<int>(nodes.size())) after = nodes[next];
      Builder b(graph, after, g.name, Phase::kBackward);
      std::vector<Value*> to_reduce;
      std::vector<size_t> reduced_index;
      for (size_t i = 0; i < grads.size(); ++i) {
        if (grads[i] == nullptr) continue;
        Value* grad = plan.reduce_dtype ? b.Cast(grads[i], *plan.reduce_dtype) : grads[i];
        if (plan.accumulated_gradient_input) {
          Value* accumulated =
              graph.AddInput(g.params[i] + ".grad.acc", Type::Tensor(WithDim0(grad->type().tensor(),
                                                                               grad->type().tensor().sizes[0])),
                             InputRole::kOptState);
          grad = b.Add("aten::add.Tensor",
                       {NodeArg(accumulated), NodeArg(grad), NodeArg(Attribute(int64_t{1}))},
                       WithDim0(grad->type().tensor(), grad->type().tensor().sizes[0]), g.params[i] + ".grad.sum.");
          if (!plan.gradient_sync) {  // accumulate locally: no reduction this micro-batch
            new_outputs.push_back({g.params[i] + ".grad.acc", grad, donated(accumulated)});
            continue;
          }
        }
        if (!plan.gradient_sync) {
          new_outputs.push_back({g.params[i] + ".grad.acc", grad});
          continue;
        }
        const TensorType& type = grad->type().tensor();
        int64_t padded_rows = ShardRows(type.sizes[0], world) * world;
        if (padded_rows != type.sizes[0]) {
          std::vector<int64_t> pad(2 * type.sizes.size(), 0);
          pad.back() = padded_rows - type.sizes[0];  // (last dim first) ... dim 0: (before, after)
          grad =
              b.Add("aten::constant_pad_nd", {NodeArg(grad), NodeArg(Attribute(pad)), NodeArg(Attribute(int64_t{0}))},
                    WithDim0(type, padded_rows), g.params[i] + ".grad.padded.");
        }
        to_reduce.push_back(grad);
        reduced_index.push_back(i);
      }
      if (!to_reduce.empty()) {
        MAGI_ASSIGN_OR_RETURN(Node * start, AddCollectiveStart(graph, CollectiveKind::kReduceScatter, to_reduce,
                                                               *group, "avg", b.before()));
        b.Annotate(start);
        Node* wait = AddWait(graph, start, b.before());
        b.Annotate(wait);
        std::vector<Value*> reduced;
        for (size_t k = 0; k < reduced_index.size(); ++k) reduced.push_back(wait->result(static_cast<int>(k)));
        if (replicate != nullptr) {  // HSDP: the mean over the replicas of this shard
          MAGI_ASSIGN_OR_RETURN(Node * all_reduce, AddCollectiveStart(graph, CollectiveKind::kAllReduce, reduced,
                                                                      *replicate, "avg", b.before()));
          b.Annotate(all_reduce);
          Node* replicated = AddWait(graph, all_reduce, b.before());
          b.Annotate(replicated);
          for (size_t k = 0; k < reduced.size(); ++k) reduced[k] = replicated->result(static_cast<int>(k));
        }
        for (size_t k = 0; k < reduced_index.size(); ++k) {
          size_t i = reduced_index[k];
          Value* shard_grad = reduced[k];
          if (plan.gradient_divisor > 1) {
            shard_grad = b.Add("aten::div.Scalar", {NodeArg(shard_grad), NodeArg(Attribute(plan.gradient_divisor))},
                               WithDim0(shard_grad->type().tensor(), shard_grad->type().tensor().sizes[0]),
                               g.params[i] + ".grad.mean.");
          }
          // CPU offload: the reduced shard goes to the host (where AdamW runs) right away.
          grad_shards[i] = offload ? b.Convert(shard_grad, shards[i]->type().tensor().dtype, host, /*always=*/true)
                                   : b.Cast(shard_grad, shards[i]->type().tensor().dtype);
        }
      }
    }
    for (const std::string& name : g.params) {
      int index = graph.FindOutput(name + ".grad");
      if (index >= 0) graph.RemoveOutput(index);
    }
    for (size_t i = 0; i < params.size(); ++i) {
      if (!plan.gradient_sync) continue;
      if (!optimizer) {
        if (grad_shards[i] != nullptr) new_outputs.push_back({g.params[i] + ".grad.shard", grad_shards[i]});
        continue;
      }
      updates.push_back({g.params[i], g.name, shards[i], grad_shards[i]});
    }
  }

  if (optimizer && plan.clip_grad_norm > 0) {
    MAGI_ASSIGN_OR_RETURN(Value * norm, ClipGradNorm(graph, *group, plan.clip_grad_norm, updates,
                                                     offload ? std::optional<Device>(compute_device) : std::nullopt));
    new_outputs.push_back({"grad_norm", norm});
  }
  for (const PendingUpdate& update : updates) {
    const std::string& name = update.name;
    const TensorType& type = update.shard->type().tensor();
    Value* exp_avg = graph.AddInput(name + ".exp_avg", Type::Tensor(type), InputRole::kOptState);
    Value* exp_avg_sq = graph.AddInput(name + ".exp_avg_sq", Type::Tensor(type), InputRole::kOptState);
    if (update.grad_shard == nullptr) {  // no gradient: AdamW leaves everything as it is
      new_outputs.push_back({name + ".shard", update.shard, donated(update.shard)});
      new_outputs.push_back({name + ".exp_avg", exp_avg, donated(exp_avg)});
      new_outputs.push_back({name + ".exp_avg_sq", exp_avg_sq, donated(exp_avg_sq)});
      continue;
    }
    // One magi::adamw per parameter (LibTorch's AdamW; see magi/ir/magi_ops.h), appended at
    // the end: backends run them as one multi-tensor kernel.
    const AdamWHyperparameters& h = plan.adamw;
    MAGI_ASSIGN_OR_RETURN(Node * adamw, AddAdamW(graph, update.shard, update.grad_shard, exp_avg, exp_avg_sq, decay,
                                                 step_size, bc2_sqrt, {h.beta1, h.beta2, h.eps}, name));
    adamw->mutable_annotations().module_path = update.group;
    adamw->mutable_annotations().phase = Phase::kOptimizer;
    new_outputs.push_back({name + ".shard", adamw->result(0), donated(update.shard)});
    new_outputs.push_back({name + ".exp_avg", adamw->result(1), donated(exp_avg)});
    new_outputs.push_back({name + ".exp_avg_sq", adamw->result(2), donated(exp_avg_sq)});
  }
  for (GraphOutput& output : new_outputs) graph.AddOutput(std::move(output.name), output.value, output.aliases);
  // Backward may also read forward views of gathered parameters (a transpose saved for
  // backward); for resharded groups those must read the backward gather, or the forward
  // copy stays alive until backward and resharding saves nothing.
  ReshardAfterForwardOptions resharded;  // mode=reshard
  for (const FsdpGroupPlan& group_plan : plan.groups) {
    if (group_plan.reshard_after_forward) resharded.groups.insert(group_plan.name);
  }
  if (!resharded.groups.empty()) {
    absl::StatusOr<bool> changed = ReshardAfterForward(std::move(resharded)).Run(module);
    if (!changed.ok()) return changed.status();
  }
  return absl::OkStatus();
}

}  // namespace magi
