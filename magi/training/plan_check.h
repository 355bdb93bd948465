// Deterministic mode's cross-rank check (internal to the FSDP frontend): every rank
// compiled its own copy of the same graph and must have arrived at the same plan.
#ifndef MAGI_TRAINING_PLAN_CHECK_H_
#define MAGI_TRAINING_PLAN_CHECK_H_

#include <ATen/ATen.h>

#include <string>

#include "absl/status/status.h"
#include "magi/comm/communicator.h"

namespace magi {

// All-gathers every rank's `plan_hash` (16 hex digits, PlanHash) as one int64 on
// `device` (the communicator's device kind) and returns FailedPrecondition naming the
// ranks whose plan differs from rank 0's. A collective: every rank must call it.
absl::Status CheckRanksAgreeOnPlan(Communicator& communicator, const std::string& plan_hash, const at::Device& device);

}  // namespace magi

#endif  // MAGI_TRAINING_PLAN_CHECK_H_
