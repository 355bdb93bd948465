// Split fp32 master weights in a trainer's state (internal to the FSDP frontend): with
// TrainingOptions::split_master_weights the compiled step takes a parameter shard
// "<p>.shard" as two inputs "<p>.shard.hi" (bf16) and "<p>.shard.lo" (int16)
// (magi/passes/split_master_weights.h), so the trainer holds those instead, and joins
// them back where the fp32 master is read: checkpoints, full parameters, a graph that
// takes the joined shard (the gradient-accumulation micro-batches).
#ifndef MAGI_FRONTEND_FSDP_SPLIT_STATE_H_
#define MAGI_FRONTEND_FSDP_SPLIT_STATE_H_

#include <ATen/ATen.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "magi/ir/graph.h"

namespace magi {

// The entries of `state` that `graph` takes split: each name N with inputs "N.hi" and
// "N.lo" and none named N.
std::vector<std::string> SplitStateNames(const Graph& graph, const std::map<std::string, at::Tensor>& state);

// Replaces each of `names` in `state` (fp32) by its halves "<name>.hi" and "<name>.lo"
// (split_tensor.h), on the entry's device, one entry at a time (the extra memory is one
// entry's). InvalidArgument naming an entry that is missing or not fp32; ResourceExhausted
// when the halves cannot be allocated. On an error the entries before the failing one are
// split already: callers split a map they throw away on failure (a trainer being created,
// a checkpoint being restored).
absl::Status SplitStateEntries(const std::vector<std::string>& names, std::map<std::string, at::Tensor>& state);

// `state` with each of `names` joined back from its halves (fresh fp32 tensors on the
// host: what a checkpoint writes); the other entries referenced, not copied. Internal
// error naming the entry when a join fails (out of memory).
absl::StatusOr<std::map<std::string, at::Tensor>> JoinedState(const std::vector<std::string>& names,
                                                              const std::map<std::string, at::Tensor>& state);

// `state` shaped as JoinedState gives it, for reading a checkpoint into: each of `names`
// an fp32 tensor of its halves' sizes and device that holds no memory of its own (an
// expanded scalar; only its dtype, sizes and device are read).
std::map<std::string, at::Tensor> JoinedStateLike(const std::vector<std::string>& names,
                                                  const std::map<std::string, at::Tensor>& state);

// The fp32 value of state entry `name`: the entry, or its halves joined (on their device).
// Internal error naming the entry when the join fails.
absl::StatusOr<at::Tensor> JoinedEntry(const std::string& name, const std::map<std::string, at::Tensor>& state);

}  // namespace magi

#endif  // MAGI_FRONTEND_FSDP_SPLIT_STATE_H_
