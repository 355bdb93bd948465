#include "magi/ir/verifier.h"

#include <initializer_list>

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "magi/ir/collectives.h"
#include "magi/ir/magi_ops.h"

namespace magi {
namespace {

constexpr int kMaxReportedErrors = 20;

// Arity of an ATen op the verifier knows: tensor operands in [min, max], results.
struct KnownOp {
  absl::string_view op;
  int min_tensors;
  int max_tensors;
  int results;
};

constexpr KnownOp kKnownOps[] = {
    {"aten::mm", 2, 2, 1},
    {"aten::bmm", 2, 2, 1},
    {"aten::addmm", 3, 3, 1},
    {"aten::matmul", 2, 2, 1},
    {"aten::t", 1, 1, 1},
    {"aten::relu", 1, 1, 1},
    {"aten::gelu", 1, 1, 1},
    {"aten::silu", 1, 1, 1},
    {"aten::add.Tensor", 2, 2, 1},
    {"aten::sub.Tensor", 2, 2, 1},
    {"aten::mul.Tensor", 2, 2, 1},
    {"aten::div.Tensor", 2, 2, 1},
    {"aten::view", 1, 1, 1},
    {"aten::clone", 1, 1, 1},
    {"aten::sum", 1, 1, 1},
    {"aten::_log_softmax", 1, 1, 1},
    {"aten::_log_softmax_backward_data", 2, 2, 1},
    {"aten::nll_loss_forward", 2, 3, 2},
    {"aten::nll_loss_backward", 4, 5, 1},
    {"aten::native_layer_norm", 1, 3, 3},
    {"aten::embedding", 2, 2, 1},
    {"aten::threshold_backward", 2, 2, 1},
};

const KnownOp* FindKnownOp(absl::string_view op) {
  for (const KnownOp& known : kKnownOps) {
    if (known.op == op) return &known;
  }
  return nullptr;
}

class GraphVerifier {
 public:
  GraphVerifier(const Graph& graph, const Module* module) : graph_(graph), module_(module) {}

  absl::Status Run() {
    for (const Value* input : graph_.inputs()) {
      defined_.insert(input);
      if (input->type().is_future()) Error(nullptr, absl::StrCat("input %", input->name(), " is a future"));
      VerifySize(nullptr, absl::StrCat("input %", input->name()), *input);
    }
    for (const Node* node : graph_.nodes()) {
      VerifyNode(*node);
      for (const Value* result : node->results()) defined_.insert(result);
    }
    absl::flat_hash_set<absl::string_view> output_names;
    for (const GraphOutput& output : graph_.outputs()) {
      if (!output_names.insert(output.name).second) Error(nullptr, absl::StrCat("output '", output.name, "' twice"));
      if (output.value == nullptr || !defined_.contains(output.value)) {
        Error(nullptr, absl::StrCat("output '", output.name, "' is not a value of the graph"));
      } else if (output.value->type().is_future()) {
        Error(nullptr, absl::StrCat("output '", output.name, "' is a future; wait for it first"));
      }
      if (output.aliases != nullptr) VerifyAlias(output);
    }
    // A donated input is gone after the run: no other output may return it.
    for (const GraphOutput& output : graph_.outputs()) {
      auto it = donated_to_.find(output.value);
      if (it != donated_to_.end() && it->second != output.name) {
        Error(nullptr, absl::StrCat("output '", output.name, "' returns %", output.value->name(),
                                    ", which is donated to output '", it->second, "'"));
      }
    }
    if (errors_.empty()) return absl::OkStatus();
    if (suppressed_ > 0) errors_.push_back(absl::StrCat("... and ", suppressed_, " more"));
    return absl::InvalidArgumentError(absl::StrJoin(errors_, "\n"));
  }

 private:
  // Donation: the aliased value is an input of this graph of the output's dtype, shape and
  // device, donated to one output only.
  void VerifyAlias(const GraphOutput& output) {
    const Value* input = output.aliases;
    std::string where = absl::StrCat("output '", output.name, "' aliases %", input->name());
    if (!input->is_graph_input() || input->graph() != &graph_) {
      Error(nullptr, absl::StrCat(where, ", which is not an input of the graph"));
      return;
    }
    if (!donated_to_.emplace(input, output.name).second) {
      Error(nullptr, absl::StrCat(where, ", which is already donated to output '", donated_to_.at(input), "'"));
      return;
    }
    if (output.value == nullptr || !defined_.contains(output.value) || output.value->type().is_future()) return;
    const TensorType& a = output.value->type().tensor();
    const TensorType& b = input->type().tensor();
    if (a.dtype != b.dtype || a.sizes != b.sizes || !(a.device == b.device)) {
      Error(nullptr, absl::StrCat(where, " of another type (", b.ToString(), " vs ", a.ToString(), ")"));
    }
  }

  void Error(const Node* node, absl::string_view message) {
    if (static_cast<int>(errors_.size()) >= kMaxReportedErrors) {
      ++suppressed_;
      return;
    }
    std::string where = absl::StrCat("graph @", graph_.name());
    if (node != nullptr) absl::StrAppend(&where, ": ", node->DebugName());
    errors_.push_back(absl::StrCat(where, ": ", message));
  }

  // Element and byte counts must fit int64 (a wrapped count would make every size
  // computed from it wrong, silently).
  void VerifySize(const Node* node, absl::string_view what, const Value& value) {
    absl::StatusOr<int64_t> bytes = value.type().tensor().CheckedSizeInBytes();
    if (!bytes.ok() && bytes.status().code() == absl::StatusCode::kOutOfRange) {
      Error(node, absl::StrCat(what, ": ", bytes.status().message()));
    }
  }

  void VerifyNode(const Node& node) {
    if (!IsValidOpName(node.op())) Error(&node, "invalid op name (expected namespace::name, e.g. aten::mm)");
    for (const Value* result : node.results()) VerifySize(&node, absl::StrCat("result %", result->name()), *result);
    for (const Argument& arg : node.args()) {
      if (!arg.name.empty() && !IsValidArgumentName(arg.name)) {
        Error(&node, absl::StrCat("invalid argument name '", arg.name, "'"));
      }
    }
    // Operands dominate their use, and every operand is referenced once by the arguments.
    for (int i = 0; i < node.num_operands(); ++i) {
      const Value* operand = node.operand(i);
      if (!defined_.contains(operand)) {
        Error(&node, absl::StrCat("operand %", operand->name(), " is used before it is defined"));
      }
      if (operand->type().is_future() && node.op() != kWaitOp) {
        Error(&node, absl::StrCat("future %", operand->name(), " may only be consumed by magi::wait"));
      }
    }
    std::vector<int> references(node.num_operands(), 0);
    for (const Argument& arg : node.args()) {
      if (arg.value.kind() == AttrKind::kOperand) {
        int index = arg.value.as_operand().index;
        if (index < 0 || index >= node.num_operands()) {
          Error(&node, "argument references a missing operand");
        } else {
          ++references[index];
        }
      } else if (arg.value.kind() == AttrKind::kOperandList) {
        for (int index : arg.value.as_operand_list().indices) {
          if (index == OperandListRef::kNoOperand) continue;
          if (index < 0 || index >= node.num_operands()) {
            Error(&node, "argument references a missing operand");
          } else {
            ++references[index];
          }
        }
      }
    }
    for (int i = 0; i < node.num_operands(); ++i) {
      if (references[i] != 1) Error(&node, absl::StrCat("operand ", i, " is referenced ", references[i], " times"));
    }

    if (node.op_namespace() == "magi") {
      if (auto kind = GetCollectiveKind(node.op())) {
        VerifyCollectiveStart(node, *kind);
      } else if (node.op() == kWaitOp) {
        VerifyWait(node);
      } else if (node.op() == kCallOp) {
        VerifyCall(node);
      } else if (node.op() == kAdamWOp) {
        VerifyAdamW(node);
      } else if (node.op() == kAdamWSplitOp) {
        VerifyAdamWSplit(node);
      } else if (node.op() == kLocalShardOp) {
        VerifyLocalShard(node);
      } else {
        Error(&node, "unknown op in the magi:: namespace");
      }
      return;
    }
    for (const Value* result : node.results()) {
      if (result->type().is_future()) Error(&node, absl::StrCat("only collective starts return futures"));
    }
    if (const KnownOp* known = FindKnownOp(node.op())) VerifyKnownOp(node, *known);
  }

  void VerifyKnownOp(const Node& node, const KnownOp& known) {
    int tensors = node.num_operands();
    if (tensors < known.min_tensors || tensors > known.max_tensors) {
      Error(&node, absl::StrCat("expects ", known.min_tensors,
                                known.max_tensors != known.min_tensors ? absl::StrCat(" to ", known.max_tensors) : "",
                                " tensor operands, got ", tensors));
      return;
    }
    if (node.num_results() != known.results) {
      Error(&node, absl::StrCat("expects ", known.results, " results, got ", node.num_results()));
      return;
    }
    // Matrix products: the shapes must chain.
    if (node.op() == "aten::mm" || node.op() == "aten::addmm" || node.op() == "aten::bmm") {
      int first = node.op() == "aten::addmm" ? 1 : 0;
      const TensorType& a = node.operand(first)->type().tensor();
      const TensorType& b = node.operand(first + 1)->type().tensor();
      const TensorType& out = node.result(0)->type().tensor();
      size_t rank = node.op() == "aten::bmm" ? 3 : 2;
      if (a.sizes.size() != rank || b.sizes.size() != rank || out.sizes.size() != rank) {
        Error(&node, absl::StrCat("expects rank-", rank, " operands and result, got ", a.ToString(), ", ",
                                  b.ToString(), " -> ", out.ToString()));
        return;
      }
      auto mismatch = [](int64_t x, int64_t y) { return x != kDynamicDim && y != kDynamicDim && x != y; };
      size_t m = rank - 2, k = rank - 1;
      if (mismatch(a.sizes[k], b.sizes[m]) || mismatch(out.sizes[m], a.sizes[m]) ||
          mismatch(out.sizes[k], b.sizes[k]) || (rank == 3 && (mismatch(a.sizes[0], b.sizes[0]) ||
                                                               mismatch(out.sizes[0], a.sizes[0])))) {
        Error(&node, absl::StrCat("shapes do not chain: ", a.ToString(), " x ", b.ToString(), " -> ",
                                  out.ToString()));
      }
    }
  }

  void VerifyCall(const Node& node) {
    std::string callee_name = CalleeName(node);
    if (callee_name.empty()) {
      Error(&node, "needs a string argument callee = \"<graph>\"");
      return;
    }
    const Graph* callee = module_ == nullptr ? nullptr : module_->FindGraph(callee_name);
    if (callee == nullptr) {
      Error(&node, absl::StrCat("calls graph @", callee_name, ", which the module does not have"));
      return;
    }
    if (callee == &graph_) {
      Error(&node, "calls its own graph");
      return;
    }
    if (node.num_operands() != static_cast<int>(callee->inputs().size())) {
      Error(&node, absl::StrCat("passes ", node.num_operands(), " tensors; @", callee_name, " takes ",
                                callee->inputs().size()));
      return;
    }
    for (int i = 0; i < node.num_operands(); ++i) {
      if (!(node.operand(i)->type() == callee->inputs()[i]->type())) {
        Error(&node, absl::StrCat("operand ", i, " is ", node.operand(i)->type().ToString(), "; @", callee_name,
                                  " takes ", callee->inputs()[i]->type().ToString()));
      }
    }
    if (node.num_results() != static_cast<int>(callee->outputs().size())) {
      Error(&node, absl::StrCat("has ", node.num_results(), " results; @", callee_name, " returns ",
                                callee->outputs().size()));
      return;
    }
    for (int i = 0; i < node.num_results(); ++i) {
      const Value* output = callee->outputs()[i].value;
      if (output != nullptr && !(node.result(i)->type() == output->type())) {
        Error(&node, absl::StrCat("result ", i, " is ", node.result(i)->type().ToString(), "; @", callee_name,
                                  " returns ", output->type().ToString()));
      }
    }
  }

  // An optimizer op's shape: `operands` tensor operands (`signature` names them) and
  // `results` results; false (reported) otherwise.
  bool CheckTensorArity(const Node& node, int operands, int results, absl::string_view signature) {
    if (node.num_operands() != operands || node.num_results() != results) {
      Error(&node, absl::StrCat("takes ", operands, " tensors (", signature, ") and returns ", results, "; got ",
                                node.num_operands(), " and ", node.num_results()));
      return false;
    }
    for (const Value* operand : node.operands()) {
      if (!operand->type().is_tensor()) {
        Error(&node, absl::StrCat("%", operand->name(), " is not a tensor"));
        return false;
      }
    }
    return true;
  }

  // The per-step scalars of an optimizer op (decay, step_size, bc2_sqrt) are 0-dim.
  void CheckScalarOperands(const Node& node, std::initializer_list<int> indices) {
    for (int i : indices) {
      if (!node.operand(i)->type().tensor().sizes.empty()) {
        Error(&node, absl::StrCat("operand ", i, " must be a 0-dim tensor, got ",
                                  node.operand(i)->type().tensor().ToString()));
      }
    }
  }

  void VerifyAdamW(const Node& node) {
    if (!CheckTensorArity(node, 7, 3, "param, grad, exp_avg, exp_avg_sq, decay, step_size, bc2_sqrt")) return;
    const TensorType& param = node.operand(kAdamWParam)->type().tensor();
    for (int i : {kAdamWGrad, kAdamWExpAvg, kAdamWExpAvgSq}) {
      const TensorType& other = node.operand(i)->type().tensor();
      if (other.dtype != param.dtype || other.sizes != param.sizes) {
        Error(&node, absl::StrCat("operand ", i, " is ", other.ToString(), "; the parameter is ", param.ToString()));
      }
    }
    CheckScalarOperands(node, {kAdamWDecay, kAdamWStepSize, kAdamWBc2Sqrt});
    for (const Value* result : node.results()) {
      const TensorType& type = result->type().tensor();
      if (type.dtype != param.dtype || type.sizes != param.sizes) {
        Error(&node, absl::StrCat("result %", result->name(), " is ", type.ToString(), "; the parameter is ",
                                  param.ToString()));
      }
    }
  }

  void VerifyAdamWSplit(const Node& node) {
    if (!CheckTensorArity(node, 8, 4, "hi, lo, grad, exp_avg, exp_avg_sq, decay, step_size, bc2_sqrt")) return;
    const std::vector<int64_t>& sizes = node.operand(kAdamWSplitHi)->type().tensor().sizes;
    auto expect = [&](const TensorType& type, DType dtype, const std::string& what) {
      if (type.dtype != dtype || type.sizes != sizes) {
        Error(&node, absl::StrCat(what, " is ", type.ToString(), "; expected ", DTypeName(dtype), " of the sizes of hi"));
      }
    };
    expect(node.operand(kAdamWSplitHi)->type().tensor(), DType::kBFloat16, "operand 0 (hi)");
    expect(node.operand(kAdamWSplitLo)->type().tensor(), DType::kInt16, "operand 1 (lo)");
    for (int i : {kAdamWSplitGrad, kAdamWSplitExpAvg, kAdamWSplitExpAvgSq}) {
      expect(node.operand(i)->type().tensor(), DType::kFloat32, absl::StrCat("operand ", i));
    }
    CheckScalarOperands(node, {kAdamWSplitDecay, kAdamWSplitStepSize, kAdamWSplitBc2Sqrt});
    const DType result_dtypes[] = {DType::kBFloat16, DType::kInt16, DType::kFloat32, DType::kFloat32};
    for (int r = 0; r < 4; ++r) {
      expect(node.result(r)->type().tensor(), result_dtypes[r], absl::StrCat("result %", node.result(r)->name()));
    }
  }

  // The module's process group that `node`'s group = "<name>" argument names; nullptr (the
  // error reported) when the argument is missing or names no group.
  const ProcessGroup* GroupArgument(const Node& node) {
    const Attribute* group_arg = node.FindArg("group");
    if (group_arg == nullptr || group_arg->kind() != AttrKind::kString) {
      Error(&node, "needs a string argument group = \"<process group>\"");
      return nullptr;
    }
    const ProcessGroup* group = module_ == nullptr ? nullptr : module_->FindProcessGroup(group_arg->as_string());
    if (group == nullptr) Error(&node, absl::StrCat("process group @", group_arg->as_string(), " does not exist"));
    return group;
  }

  void VerifyLocalShard(const Node& node) {
    if (node.num_operands() != 1 || node.num_results() != 1 || !node.operand(0)->type().is_tensor()) {
      Error(&node, "takes one tensor and returns one");
      return;
    }
    const ProcessGroup* group = GroupArgument(node);
    if (group == nullptr) return;
    absl::StatusOr<TensorType> expected = LocalShardType(node.operand(0)->type().tensor(), group->size);
    if (!expected.ok()) {
      Error(&node, absl::StrCat("%", node.operand(0)->name(), " over @", group->name, ": ", expected.status().message()));
    } else if (!node.result(0)->type().is_tensor() || *expected != node.result(0)->type().tensor()) {
      Error(&node, absl::StrCat("result %", node.result(0)->name(), " should be ", expected->ToString(), " over @",
                                group->name, " (size ", group->size, "), not ", node.result(0)->type().ToString()));
    }
  }

  void VerifyCollectiveStart(const Node& node, CollectiveKind kind) {
    const ProcessGroup* group = GroupArgument(node);
    if (group == nullptr) return;
    if (TakesReduceOp(kind)) {
      const Attribute* reduce_op = node.FindArg("reduce_op");
      if (reduce_op == nullptr || reduce_op->kind() != AttrKind::kString || !IsValidReduceOp(reduce_op->as_string())) {
        Error(&node, "needs reduce_op = \"sum\", \"avg\", \"max\" or \"min\"");
      }
    }
    if (node.args().empty() || node.args()[0].value.kind() != AttrKind::kOperandList ||
        node.ArgOperands(0).size() != node.args()[0].value.as_operand_list().indices.size()) {
      Error(&node, "first argument must be a list of tensors (no none entries)");
      return;
    }
    std::vector<Value*> inputs = node.ArgOperands(0);
    if (inputs.empty()) Error(&node, "collects no tensors");
    if (static_cast<int>(inputs.size()) != node.num_results()) {
      Error(&node, absl::StrCat("has ", inputs.size(), " tensors but ", node.num_results(), " futures"));
      return;
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Value* result = node.result(static_cast<int>(i));
      if (!inputs[i]->type().is_tensor()) {
        Error(&node, absl::StrCat("input %", inputs[i]->name(), " is not a tensor"));
        continue;
      }
      if (!result->type().is_future()) {
        Error(&node, absl::StrCat("result %", result->name(), " must be a future"));
        continue;
      }
      absl::StatusOr<TensorType> expected = CollectiveResultType(kind, inputs[i]->type().tensor(), group->size);
      if (!expected.ok()) {
        Error(&node, absl::StrCat("input %", inputs[i]->name(), ": ", expected.status().message()));
      } else if (*expected != result->type().tensor()) {
        Error(&node, absl::StrCat("result %", result->name(), " should be future<", expected->ToString(), "> over @",
                                  group->name, " (size ", group->size, "), not ", result->type().ToString()));
      }
    }
    // Exactly one wait consumes all futures, in order.
    const Node* wait = nullptr;
    for (int i = 0; i < node.num_results(); ++i) {
      const Value* future = node.result(i);
      if (future->uses().size() != 1) {
        Error(&node, absl::StrCat("future %", future->name(), " has ", future->uses().size(),
                                  " uses; it needs exactly one magi::wait"));
        return;
      }
      const Use& use = future->uses()[0];
      if (use.user->op() != kWaitOp || use.operand_index != i || (wait != nullptr && use.user != wait)) {
        Error(&node, "its futures must all be consumed, in order, by one magi::wait");
        return;
      }
      wait = use.user;
    }
    if (wait != nullptr && wait->num_operands() != node.num_results()) {
      Error(wait, absl::StrCat("waits on ", wait->num_operands(), " futures but its start has ", node.num_results()));
    }
  }

  void VerifyWait(const Node& node) {
    if (node.num_operands() == 0) {
      Error(&node, "waits on nothing");
      return;
    }
    const Node* start = node.operand(0)->producer();
    if (start == nullptr || !IsCollectiveStart(start->op())) {
      Error(&node, "operands must be futures of a collective start");
      return;
    }
    if (node.num_results() != node.num_operands()) {
      Error(&node, absl::StrCat("has ", node.num_operands(), " futures but ", node.num_results(), " results"));
      return;
    }
    for (int i = 0; i < node.num_operands(); ++i) {
      const Value* future = node.operand(i);
      if (future->producer() != start || future->result_index() != i) {
        Error(&node, "operands must be all futures of one start, in order");
        return;
      }
      const Value* result = node.result(i);
      if (!result->type().is_tensor() || result->type().tensor() != future->type().tensor()) {
        Error(&node, absl::StrCat("result %", result->name(), " should be ", future->type().tensor().ToString(),
                                  ", not ", result->type().ToString()));
      }
    }
  }

  const Graph& graph_;
  const Module* module_;
  absl::flat_hash_set<const Value*> defined_;
  absl::flat_hash_map<const Value*, std::string> donated_to_;  // donated input -> its output
  std::vector<std::string> errors_;
  int suppressed_ = 0;
};

}  // namespace

absl::Status VerifyGraph(const Graph& graph, const Module* module) { return GraphVerifier(graph, module).Run(); }

absl::Status VerifyModule(const Module& module) {
  std::vector<std::string> errors;
  for (const Graph* graph : module.graphs()) {
    absl::Status status = VerifyGraph(*graph, &module);
    if (!status.ok()) errors.emplace_back(status.message());
  }
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
}

}  // namespace magi
