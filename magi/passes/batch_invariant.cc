#include "magi/passes/batch_invariant.h"

#include <map>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "magi/analysis/op_traits.h"
#include "magi/base/status_macros.h"
#include "magi/ir/graph_utils.h"
#include "magi/passes/pass_registration.h"

namespace magi {
namespace {

std::string Where(const Graph& graph) { return absl::StrCat("batch-invariant: @", graph.name(), ": "); }

// `type` with dim 0 of `dim0` (strides dropped: the results built with it are contiguous).
Type WithDim0(const Type& type, int64_t dim0) {
  TensorType tensor = type.tensor();
  tensor.sizes[0] = dim0;
  tensor.strides.clear();
  return Type::Tensor(std::move(tensor));
}

// True if `type` is a tensor whose dim 0 is one sequence.
bool HasSequenceDim(const Type& type) {
  return type.is_tensor() && !type.tensor().sizes.empty() && type.tensor().sizes[0] == 1;
}

absl::StatusOr<bool> UnrollGraph(Graph& graph, int64_t batch) {
  // 1. The data inputs, and the nodes that depend on them (program order).
  absl::flat_hash_set<const Value*> dependent;
  std::vector<Value*> inputs(graph.inputs().begin(), graph.inputs().end());
  bool any_data = false;
  for (Value* input : inputs) {
    if (input->role() != InputRole::kData) continue;
    if (!HasSequenceDim(input->type())) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(graph), "data input %", input->name(), " is ", input->type().ToString(),
          "; the graph must be captured for one sequence (a tensor whose dim 0 is 1)"));
    }
    dependent.insert(input);
    any_data = true;
  }
  if (!any_data) return false;
  std::vector<Node*> unrolled;
  for (Node* node : graph.nodes()) {
    bool reads_data = false;
    for (Value* operand : node->operands()) reads_data = reads_data || dependent.contains(operand);
    if (!reads_data) continue;
    OpTraits traits = GetOpTraits(node->op());
    if (traits.random || traits.side_effects) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(graph), node->DebugName(), traits.random ? " draws random numbers" : " has side effects",
          " and depends on the data: one copy per sequence would ", traits.random ? "draw" : "write", " ", batch,
          " times"));
    }
    for (Value* result : node->results()) dependent.insert(result);
    unrolled.push_back(node);
  }
  for (const GraphOutput& output : graph.outputs()) {
    if (dependent.contains(output.value) && !HasSequenceDim(output.value->type())) {
      return absl::InvalidArgumentError(absl::StrCat(Where(graph), "output '", output.name, "' (%",
                                                     output.value->name(), ": ", output.value->type().ToString(),
                                                     ") depends on the data but has no sequence dim 0 of size 1"));
    }
  }
  if (batch == 1) return false;

  // 2. Re-create the inputs in their order (names and positions kept; data inputs take
  //    `batch` sequences). A data input's old value stays as a placeholder, read by the
  //    original nodes, until they are erased.
  absl::flat_hash_map<const Value*, Value*> batched;  // placeholder -> batched input
  std::vector<Value*> placeholders;
  for (Value* input : inputs) {
    Value* placeholder = graph.AddInput(graph.FreshName(input->name() + ".one."), input->type(), input->role());
    graph.ReplaceAllUsesWith(input, placeholder);
    std::string name = input->name();
    Type type = input->role() == InputRole::kData ? WithDim0(input->type(), batch) : input->type();
    InputRole role = input->role();
    // Donation (GraphOutput::aliases) follows the input to its batched form.
    std::vector<int> donated_to;
    for (size_t i = 0; i < graph.outputs().size(); ++i) {
      if (graph.outputs()[i].aliases == input) {
        donated_to.push_back(static_cast<int>(i));
        graph.SetOutputAlias(static_cast<int>(i), nullptr);
      }
    }
    graph.EraseInput(input);
    Value* fresh = graph.AddInput(name, std::move(type), role);
    for (int i : donated_to) graph.SetOutputAlias(i, fresh);
    if (role == InputRole::kData) {
      batched[placeholder] = fresh;
      placeholders.push_back(placeholder);
    } else {
      graph.ReplaceAllUsesWith(placeholder, fresh);
      graph.EraseInput(placeholder);
    }
  }

  // 3. Copy each data-dependent node once per sequence, right where it was.
  std::vector<absl::flat_hash_map<const Value*, Value*>> maps(batch);
  for (Node* node : unrolled) {
    for (int64_t b = 0; b < batch; ++b) {
      auto& map = maps[b];
      for (Value* operand : node->operands()) {
        if (map.contains(operand)) continue;
        auto it = batched.find(operand);
        if (it == batched.end()) {
          map[operand] = operand;  // shared by every sequence
          continue;
        }
        Node* slice = graph.AddNode("aten::slice.Tensor",
                                    {NodeArg(it->second), NodeArg(Attribute(int64_t{0})), NodeArg(Attribute(b)),
                                     NodeArg(Attribute(b + 1)), NodeArg(Attribute(int64_t{1}))},
                                    {operand->type()}, node, {graph.FreshName(absl::StrCat(it->second->name(), ".seq", b, "."))});
        slice->mutable_annotations().phase = node->annotations().phase;
        map[operand] = slice->result(0);
      }
      CopyNode(*node, graph, map, /*before=*/node);
    }
  }

  // 4. Outputs: the sequences' results side by side on dim 0.
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    Value* value = graph.outputs()[i].value;
    if (auto it = batched.find(value); it != batched.end()) {
      graph.SetOutputValue(static_cast<int>(i), it->second);
      continue;
    }
    if (!dependent.contains(value)) continue;
    std::vector<Value*> parts;
    for (int64_t b = 0; b < batch; ++b) parts.push_back(maps[b].at(value));
    Node* cat = graph.AddNode("aten::cat", {NodeArg(parts), NodeArg(Attribute(int64_t{0}))},
                              {WithDim0(value->type(), batch)}, nullptr, {graph.FreshName(value->name() + ".batched.")});
    if (value->producer() != nullptr) cat->mutable_annotations().phase = value->producer()->annotations().phase;
    graph.SetOutputValue(static_cast<int>(i), cat->result(0));
  }

  // 5. The one-sequence originals go, last first, then the placeholders.
  for (auto it = unrolled.rbegin(); it != unrolled.rend(); ++it) graph.EraseNode(*it);
  for (Value* placeholder : placeholders) graph.EraseInput(placeholder);
  return true;
}

}  // namespace

const OptionSchema<BatchInvariantOptions>& BatchInvariantOptions::Schema() {
  static const auto* schema = new OptionSchema<BatchInvariantOptions>(
      {
          Field("batch", &BatchInvariantOptions::batch, Integer(1)),
      },
      [](const BatchInvariantOptions& options) {
        return options.batch >= 1 ? absl::OkStatus() : absl::InvalidArgumentError("needs batch=N (sequences per run)");
      });
  return *schema;
}

absl::StatusOr<bool> BatchInvariant::RunOnGraph(Graph& graph) {
  if (options_.batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch-invariant: batch must be >= 1, not ", options_.batch));
  }
  return UnrollGraph(graph, options_.batch);
}

MAGI_REGISTER_PASS(BatchInvariant);

}  // namespace magi
