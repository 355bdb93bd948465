#include "magi/training/plan_check.h"

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "magi/base/status_macros.h"

namespace magi {

absl::Status CheckRanksAgreeOnPlan(Communicator& communicator, const std::string& plan_hash, const at::Device& device) {
  uint64_t bits = 0;
  if (plan_hash.size() != 16 || !absl::SimpleHexAtoi(plan_hash, &bits)) {
    return absl::InternalError(absl::StrCat("malformed plan hash '", plan_hash, "'"));
  }
  int64_t as_int;
  std::memcpy(&as_int, &bits, sizeof(as_int));
  at::Tensor mine = at::full({1}, as_int, at::TensorOptions().dtype(at::kLong).device(device));
  MAGI_ASSIGN_OR_RETURN(auto handle, communicator.Start(CollectiveKind::kAllGather, {mine}, "sum"));
  MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> gathered, handle->Wait());
  at::Tensor all = gathered[0].cpu();
  std::string differing;
  const int64_t* hashes = all.data_ptr<int64_t>();
  for (int64_t r = 1; r < all.numel(); ++r) {
    if (hashes[r] != hashes[0]) {
      uint64_t other;
      std::memcpy(&other, &hashes[r], sizeof(other));
      absl::StrAppendFormat(&differing, "%s rank %d has %016x", differing.empty() ? "" : ",", r, other);
    }
  }
  if (differing.empty()) return absl::OkStatus();
  uint64_t first;
  std::memcpy(&first, &hashes[0], sizeof(first));
  return absl::FailedPreconditionError(absl::StrFormat(
      "rank %d: deterministic mode needs one plan on every rank, but rank 0 compiled plan %016x and%s (another "
      "model, options or Magi build on some rank?)",
      communicator.rank(), first, differing));
}

}  // namespace magi
