// Magi's first-class collective operations and helpers to build them.
//
// Every collective is split into an asynchronous start and a wait, so passes can
// move the start early (prefetch) and the wait late (overlap):
//
//   %f0, %f1 = magi::all_gather_start([%w0.shard, %w1.shard], group = "dp") : future<f32[64,32]>, future<f32[32]>
//   %w0, %w1 = magi::wait(%f0, %f1) : f32[64,32], f32[32]
//
// A start takes one tensor list (more than one tensor is a bucket: one fused
// collective) and returns one future per tensor; exactly one magi::wait consumes all of
// a start's futures, in order. All-gather concatenates along dim 0 (each rank's
// shard), reduce-scatter reduces and splits along dim 0, all-reduce keeps the shape,
// all-to-all splits dim 0 across ranks. `group` names a module process group;
// reduce-scatter and all-reduce take `reduce_op` ("sum", "avg", "max", "min").
#ifndef MAGI_IR_COLLECTIVES_H_
#define MAGI_IR_COLLECTIVES_H_

#include <optional>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "magi/ir/graph.h"
#include "magi/ir/module.h"

namespace magi {

inline constexpr absl::string_view kAllGatherStartOp = "magi::all_gather_start";
inline constexpr absl::string_view kReduceScatterStartOp = "magi::reduce_scatter_start";
inline constexpr absl::string_view kAllReduceStartOp = "magi::all_reduce_start";
inline constexpr absl::string_view kAllToAllStartOp = "magi::all_to_all_start";
inline constexpr absl::string_view kWaitOp = "magi::wait";

enum class CollectiveKind : uint8_t { kAllGather, kReduceScatter, kAllReduce, kAllToAll };

// The kind of a collective start op, or nullopt for any other op.
std::optional<CollectiveKind> GetCollectiveKind(absl::string_view op);
absl::string_view CollectiveStartOp(CollectiveKind kind);
inline bool IsCollectiveStart(absl::string_view op) { return GetCollectiveKind(op).has_value(); }
inline bool IsCommunication(absl::string_view op) { return IsCollectiveStart(op) || op == kWaitOp; }
// True for reduce-scatter and all-reduce.
bool TakesReduceOp(CollectiveKind kind);
// The stream a collective runs on when its node has no `stream` annotation: all-gathers
// on 1, reduce-scatters on 2, the rest on 3 (0 is the compute stream). The scheduler, the
// simulator and the CUDA runtime agree on it.
int DefaultCollectiveStream(CollectiveKind kind);
// Known reduction names.
bool IsValidReduceOp(absl::string_view reduce_op);

// The type of the tensor a collective of `kind` over `group_size` ranks produces
// from `input`; an error when the input cannot be split evenly or has rank 0.
absl::StatusOr<TensorType> CollectiveResultType(CollectiveKind kind, const TensorType& input, int64_t group_size);

// Appends (or inserts before `before`) a start over `inputs` on `group`; results are
// futures of the inferred types. `reduce_op` is ignored for gathers.
absl::StatusOr<Node*> AddCollectiveStart(Graph& graph, CollectiveKind kind, const std::vector<Value*>& inputs,
                                         const ProcessGroup& group, absl::string_view reduce_op = "sum",
                                         Node* before = nullptr);
// Appends (or inserts before `before`) the wait for all futures of `start`.
Node* AddWait(Graph& graph, Node* start, Node* before = nullptr);

// The start whose futures `wait` consumes (null if malformed).
Node* StartOfWait(const Node& wait);
// The wait that consumes `start`'s futures (null if there is none yet).
Node* WaitOfStart(const Node& start);

}  // namespace magi

#endif  // MAGI_IR_COLLECTIVES_H_
