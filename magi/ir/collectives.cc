#include "magi/ir/collectives.h"

#include "absl/strings/str_cat.h"
#include "magi/base/check.h"
#include "magi/base/checked_math.h"

namespace magi {

std::optional<CollectiveKind> GetCollectiveKind(absl::string_view op) {
  if (op == kAllGatherStartOp) return CollectiveKind::kAllGather;
  if (op == kReduceScatterStartOp) return CollectiveKind::kReduceScatter;
  if (op == kAllReduceStartOp) return CollectiveKind::kAllReduce;
  if (op == kAllToAllStartOp) return CollectiveKind::kAllToAll;
  return std::nullopt;
}

absl::string_view CollectiveStartOp(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather:
      return kAllGatherStartOp;
    case CollectiveKind::kReduceScatter:
      return kReduceScatterStartOp;
    case CollectiveKind::kAllReduce:
      return kAllReduceStartOp;
    case CollectiveKind::kAllToAll:
      return kAllToAllStartOp;
  }
  return kAllReduceStartOp;
}

bool TakesReduceOp(CollectiveKind kind) {
  return kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllReduce;
}

bool IsValidReduceOp(absl::string_view reduce_op) {
  return reduce_op == "sum" || reduce_op == "avg" || reduce_op == "max" || reduce_op == "min";
}

absl::StatusOr<TensorType> CollectiveResultType(CollectiveKind kind, const TensorType& input, int64_t group_size) {
  if (group_size < 1) return absl::InvalidArgumentError(absl::StrCat("group size ", group_size, " < 1"));
  TensorType result = input;
  result.strides.clear();  // collectives produce contiguous tensors
  if (kind == CollectiveKind::kAllReduce) return result;
  if (input.sizes.empty()) return absl::InvalidArgumentError("a 0-d tensor has no dim 0 to gather or split");
  int64_t& dim0 = result.sizes[0];
  if (dim0 == kDynamicDim) return result;
  switch (kind) {
    case CollectiveKind::kAllGather: {
      std::optional<int64_t> gathered = CheckedMul(dim0, group_size);
      if (!gathered) {
        return absl::InvalidArgumentError(absl::StrCat("gathering ", input.ToString(), " over ", group_size,
                                                       " ranks overflows int64 in dim 0"));
      }
      dim0 = *gathered;
      break;
    }
    case CollectiveKind::kReduceScatter:
      if (dim0 % group_size != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("dim 0 of ", input.ToString(), " does not split evenly over ", group_size, " ranks"));
      }
      dim0 /= group_size;
      break;
    case CollectiveKind::kAllToAll:
      if (dim0 % group_size != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("dim 0 of ", input.ToString(), " does not split evenly over ", group_size, " ranks"));
      }
      break;
    case CollectiveKind::kAllReduce:
      break;
  }
  return result;
}

int DefaultCollectiveStream(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather:
      return 1;
    case CollectiveKind::kReduceScatter:
      return 2;
    default:
      return 3;
  }
}

absl::StatusOr<Node*> AddCollectiveStart(Graph& graph, CollectiveKind kind, const std::vector<Value*>& inputs,
                                         const ProcessGroup& group, absl::string_view reduce_op, Node* before) {
  if (inputs.empty()) return absl::InvalidArgumentError("a collective needs at least one tensor");
  std::vector<Type> result_types;
  for (Value* input : inputs) {
    if (!input->type().is_tensor()) {
      return absl::InvalidArgumentError(absl::StrCat("%", input->name(), " is not a tensor"));
    }
    auto type = CollectiveResultType(kind, input->type().tensor(), group.size);
    if (!type.ok()) return absl::InvalidArgumentError(absl::StrCat("%", input->name(), ": ", type.status().message()));
    result_types.push_back(Type::Future(*std::move(type)));
  }
  std::vector<NodeArg> args = {NodeArg(inputs), NodeArg(Attribute(group.name), "group")};
  if (TakesReduceOp(kind)) {
    if (!IsValidReduceOp(reduce_op)) {
      return absl::InvalidArgumentError(absl::StrCat("unknown reduce_op '", reduce_op, "'"));
    }
    args.push_back(NodeArg(Attribute(std::string(reduce_op)), "reduce_op"));
  }
  return graph.AddNode(std::string(CollectiveStartOp(kind)), std::move(args), std::move(result_types), before);
}

Node* AddWait(Graph& graph, Node* start, Node* before) {
  MAGI_CHECK(IsCollectiveStart(start->op())) << start->DebugName() << " is not a collective start";
  std::vector<NodeArg> args;
  std::vector<Type> types;
  for (Value* future : start->results()) {
    args.emplace_back(future);
    types.push_back(Type::Tensor(future->type().tensor()));
  }
  Node* wait = graph.AddNode(std::string(kWaitOp), std::move(args), std::move(types), before);
  wait->mutable_annotations().bucket = start->annotations().bucket;
  return wait;
}

Node* StartOfWait(const Node& wait) {
  if (wait.num_operands() == 0) return nullptr;
  return wait.operand(0)->producer();
}

Node* WaitOfStart(const Node& start) {
  for (const Value* result : start.results()) {
    for (const Use& use : result->uses()) {
      if (use.user->op() == kWaitOp) return use.user;
    }
  }
  return nullptr;
}

}  // namespace magi
