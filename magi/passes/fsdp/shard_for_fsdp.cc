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

  Value* Cast(Value* value, DType dtype) {
    if (value->type().tensor().dtype == dtype) return value;
    TensorType type = value->type().tensor();
    type.dtype = dtype;
    type.strides.clear();
    return Add("aten::_to_copy",
               {NodeArg(value), NodeArg(Attribute(dtype), "dtype"), NodeArg(Attribute(NoneAttr{}), "layout"),
                NodeArg(Attribute(NoneAttr{}), "device"), NodeArg(Attribute(NoneAttr{}), "pin_memory"),
                NodeArg(Attribute(false), "non_blocking"), NodeArg(Attribute(NoneAttr{}), "memory_format")},
               std::move(type), value->name() + ".cast.");
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

// All-gathers `shards` (one bucket) and slices each back to its parameter's shape.
absl::StatusOr<std::vector<Value*>> GatherGroup(Graph& graph, const ProcessGroup& group, Builder& b,
                                                const std::vector<Value*>& shards, const std::vector<Value*>& params) {
  std::vector<Value*> to_gather;
  for (size_t i = 0; i < shards.size(); ++i) to_gather.push_back(b.Cast(shards[i], params[i]->type().tensor().dtype));
  MAGI_ASSIGN_OR_RETURN(Node * start,
                        AddCollectiveStart(graph, CollectiveKind::kAllGather, to_gather, group, "sum", b.before()));
  b.Annotate(start);
  Node* wait = AddWait(graph, start, b.before());
  b.Annotate(wait);
  std::vector<Value*> full;
  for (size_t i = 0; i < params.size(); ++i) {
    Value* gathered = wait->result(static_cast<int>(i));
    int64_t dim0 = params[i]->type().tensor().sizes[0];
    if (gathered->type().tensor().sizes[0] == dim0) {
      full.push_back(gathered);
      continue;
    }
    TensorType type = WithDim0(gathered->type().tensor(), dim0);
    full.push_back(b.Add("aten::slice.Tensor",
                         {NodeArg(gathered), NodeArg(Attribute(int64_t{0})), NodeArg(Attribute(int64_t{0})),
                          NodeArg(Attribute(dim0)), NodeArg(Attribute(int64_t{1}))},
                         type, params[i]->name() + ".full."));
  }
  return full;
}

}  // namespace

absl::Status ShardForFsdp(Module& module, Graph& graph, const FsdpPlan& plan) {
  if (plan.world_size < 1) return absl::InvalidArgumentError("world_size must be >= 1");
  const ProcessGroup* group = module.FindProcessGroup(plan.process_group);
  if (group == nullptr) {
    group = module.AddProcessGroup({plan.process_group, plan.mesh_axis, plan.world_size, {}});
  } else if (group->size != plan.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("process group @", group->name, " has size ", group->size, ", the plan says ", plan.world_size));
  }
  const int64_t world = plan.world_size;
  absl::flat_hash_set<std::string> planned;
  for (const FsdpGroupPlan& g : plan.groups) {
    for (const std::string& name : g.params) {
      if (!planned.insert(name).second) {
        return absl::InvalidArgumentError(absl::StrCat("parameter ", name, " is in two FSDP groups"));
      }
    }
  }

  // Optimizer scalars, shared by every parameter.
  Value* decay = nullptr;
  Value* step_size = nullptr;
  Value* bc2_sqrt = nullptr;
  if (plan.optimizer) {
    TensorType scalar{DType::kFloat32, {}};
    for (const Value* input : graph.inputs()) {
      if (input->role() == InputRole::kParam) scalar.device = input->type().tensor().device;
    }
    decay = graph.AddInput("adamw.decay", Type::Tensor(scalar), InputRole::kOptState);
    step_size = graph.AddInput("adamw.step_size", Type::Tensor(scalar), InputRole::kOptState);
    bc2_sqrt = graph.AddInput("adamw.bc2_sqrt", Type::Tensor(scalar), InputRole::kOptState);
  }
  std::vector<GraphOutput> new_outputs;

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
    if (first_forward != nullptr) {
      Builder b(graph, first_forward, g.name, Phase::kForward);
      MAGI_ASSIGN_OR_RETURN(forward_full, GatherGroup(graph, *group, b, shards, params));
    }
    if (first_backward != nullptr) {
      if (g.reshard_after_forward || forward_full.empty()) {
        Builder b(graph, first_backward, g.name, Phase::kBackward);
        MAGI_ASSIGN_OR_RETURN(backward_full, GatherGroup(graph, *group, b, shards, params));
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
      MAGI_ASSIGN_OR_RETURN(Node * start, AddCollectiveStart(graph, CollectiveKind::kReduceScatter, to_reduce, *group,
                                                             "avg", b.before()));
      b.Annotate(start);
      Node* wait = AddWait(graph, start, b.before());
      b.Annotate(wait);
      for (size_t k = 0; k < reduced_index.size(); ++k) {
        size_t i = reduced_index[k];
        grad_shards[i] = b.Cast(wait->result(static_cast<int>(k)), shards[i]->type().tensor().dtype);
      }
    }
    for (const std::string& name : g.params) {
      int index = graph.FindOutput(name + ".grad");
      if (index >= 0) graph.RemoveOutput(index);
    }

    for (size_t i = 0; i < params.size(); ++i) {
      const std::string& name = g.params[i];
      if (!plan.optimizer) {
        if (grad_shards[i] != nullptr) new_outputs.push_back({name + ".grad.shard", grad_shards[i]});
        continue;
      }
      const TensorType& type = shards[i]->type().tensor();
      Value* exp_avg = graph.AddInput(name + ".exp_avg", Type::Tensor(type), InputRole::kOptState);
      Value* exp_avg_sq = graph.AddInput(name + ".exp_avg_sq", Type::Tensor(type), InputRole::kOptState);
      if (grad_shards[i] == nullptr) {  // no gradient: AdamW leaves everything as it is
        new_outputs.push_back({name + ".shard", shards[i]});
        new_outputs.push_back({name + ".exp_avg", exp_avg});
        new_outputs.push_back({name + ".exp_avg_sq", exp_avg_sq});
        continue;
      }
      // One magi::adamw per parameter (LibTorch's AdamW; see magi/ir/magi_ops.h), appended at
      // the end: backends run them as one multi-tensor kernel.
      const AdamWHyperparameters& h = plan.adamw;
      MAGI_ASSIGN_OR_RETURN(Node * adamw, AddAdamW(graph, shards[i], grad_shards[i], exp_avg, exp_avg_sq, decay,
                                                   step_size, bc2_sqrt, {h.beta1, h.beta2, h.eps}, name));
      adamw->mutable_annotations().module_path = g.name;
      adamw->mutable_annotations().phase = Phase::kOptimizer;
      Value* p2 = adamw->result(0);
      Value* m2 = adamw->result(1);
      Value* v2 = adamw->result(2);
      new_outputs.push_back({name + ".shard", p2});
      new_outputs.push_back({name + ".exp_avg", m2});
      new_outputs.push_back({name + ".exp_avg_sq", v2});
    }
  }
  for (GraphOutput& output : new_outputs) graph.AddOutput(std::move(output.name), output.value);
  // Backward may also read forward views of gathered parameters (a transpose saved for
  // backward); for resharded groups those must read the backward gather, or the forward
  // copy stays alive until backward and resharding saves nothing.
  std::set<std::string> resharded;
  for (const FsdpGroupPlan& group_plan : plan.groups) {
    if (group_plan.reshard_after_forward) resharded.insert(group_plan.name);
  }
  if (!resharded.empty()) {
    absl::StatusOr<bool> changed = ReshardAfterForward(/*reshard=*/true, std::move(resharded)).Run(module);
    if (!changed.ok()) return changed.status();
  }
  return absl::OkStatus();
}

}  // namespace magi
