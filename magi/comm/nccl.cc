#include "magi/comm/nccl.h"

#include "absl/strings/str_cat.h"

namespace magi {

absl::StatusOr<ncclDataType_t> NcclDataType(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return ncclFloat32;
    case at::kDouble:
      return ncclFloat64;
    case at::kHalf:
      return ncclFloat16;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kInt:
      return ncclInt32;
    case at::kLong:
      return ncclInt64;
    case at::kByte:
      return ncclUint8;
    default:
      return absl::UnimplementedError(absl::StrCat("NCCL cannot reduce ", c10::toString(type), " tensors"));
  }
}

absl::StatusOr<ncclRedOp_t> NcclReduceOp(absl::string_view reduce_op) {
  if (reduce_op == "sum") return ncclSum;
  if (reduce_op == "avg") return ncclAvg;
  if (reduce_op == "max") return ncclMax;
  if (reduce_op == "min") return ncclMin;
  return absl::InvalidArgumentError(absl::StrCat("unknown reduce_op '", reduce_op, "'"));
}

}  // namespace magi
