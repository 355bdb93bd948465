// Functionalization of writes through views, for frontends that build a functional IR
// graph from a program that mutates tensors in place: the FX importer (which sees a graph
// and its exporter's metadata) and whole-step capture (which sees the real tensors and
// storages while the step runs) both report views and writes here, so they share one
// definition of what a write through a view does.
//
// It follows PyTorch's functionalization: every tensor is an alias of one storage,
// described by its view chain from the storage's root tensor (a graph input or the
// result of a non-view op). The frontend reports what the program does:
//
//   AliasTracker tracker(graph);
//   int x = tracker.AddRoot(x_value);                                // input %x
//   int row = tracker.AddView(x, select_node, 0);                     // x[0]
//   // x[0].add_(1): the frontend emits add(row_value, 1) and reports the write:
//   MAGI_RETURN_IF_ERROR(tracker.Write(row, add_node->result(0)));
//   MAGI_ASSIGN_OR_RETURN(Value* x_now, tracker.Read(x));             // sees the write
//
// Write() turns a write to a view into a write to the root, emitting the inverse of each
// view step (select_scatter, slice_scatter, diagonal_scatter, as_strided_scatter, a
// reshape or permute back, ...) from the view up to the root; Read() regenerates an alias
// whose storage was written since its value was taken by replaying its view chain on the
// root's new value. Written roots that are graph inputs are listed by WrittenInputs(), so
// the frontend can return their final values ("<input>.updated").
//
// It does NOT decide what is a view (the frontend knows the schemas) and refuses, with
// an error naming the view op, writes it cannot express exactly: through expand (several
// elements share memory), unfold, as_strided of anything but a root that starts its
// storage, an as_strided reaching past its root, an op whose aliasing is uncertain, or a
// view op it does not know, or a write of a new shape into a view. Nodes are appended
// at the end of the graph. No LibTorch.
#ifndef MAGI_FRONTEND_COMMON_ALIAS_TRACKER_H_
#define MAGI_FRONTEND_COMMON_ALIAS_TRACKER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/ir/graph.h"

namespace magi {

// True if a tensor of `sizes` with `strides` (empty: contiguous) holds each of its
// elements once with no gaps: a contiguous layout, or one of its dimensions permuted
// (what a transpose's elementwise result has). Size-1 dimensions' strides do not matter.
bool IsDenseLayout(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides);

class AliasTracker {
 public:
  struct RootOptions {
    // The root's layout is its storage: from storage offset 0, every element once with no
    // gaps, contiguous or in a permuted order (IsDenseLayout; the root value's type holds
    // the strides), so an as_strided view of it addresses memory the tracker can rebuild
    // after a write, and can be written back with as_strided_scatter.
    bool starts_storage = false;
    // Non-empty: whether the root shares memory with another alias is not known (an op
    // that may or may not return a view); writes to it are refused with this reason.
    std::string uncertain;
  };
  
  explicit AliasTracker(Graph* graph) : graph_(graph) {}
  AliasTracker(const AliasTracker&) = delete;
  AliasTracker& operator=(const AliasTracker&) = delete;

  // A tensor with its own storage: a graph input or the result of an op that is no view.
  int AddRoot(Value* value, RootOptions options);
  int AddRoot(Value* value);
  // Result `result_index` of `view_node` (already in the graph, reading `base`'s current
  // value as its operand 0) is a view of alias `base`.
  int AddView(int base, const Node* view_node, int result_index);
  // Marks the storage of `alias` as one whose aliasing is uncertain (see RootOptions).
  void MarkUncertain(int alias, std::string reason);
  // Calls `hook` on every node the tracker emits from now on (inverse views, scatters,
  // regenerated views, contiguous copies), so that the frontend can annotate them as it
  // annotates its own nodes (module path, phase). An empty function clears it.
  void SetNodeHook(std::function<void(Node*)> hook) { hook_ = std::move(hook); }

  // The current value of `alias`, regenerated from its root if the storage was written
  // since (emits the view ops of its chain).
  absl::StatusOr<Value*> Read(int alias);
  // `alias` now holds `value` (the functional result of an in-place op on it): writes it
  // back into the storage's root and makes every other alias of that storage stale.
  absl::Status Write(int alias, Value* value);

  // The storage root alias of `alias`; two aliases share memory iff their roots match.
  int RootOf(int alias) const;
  // True while the root's value is the traced program's own tensor (a graph input or the
  // result of one of its ops), so its memory layout at run time is the traced one.
  bool LayoutIsFaithful(int alias) const;
  bool StartsStorage(int alias) const;
  // A value whose memory is `alias`'s root's memory as traced, for ops that address memory
  // directly (as_strided): the root itself while faithful, else, when the root starts its
  // storage, a contiguous copy (for a permuted dense root: of the root permuted into memory
  // order, so its shape is the root's in that order); an error otherwise.
  absl::StatusOr<Value*> StorageBase(int alias);
  // What an as_strided of `alias` reads, and which alias its result is a view of:
  // as_strided addresses its input's storage, not its elements, so it reads the storage's
  // root in the traced layout (StorageBase) when the root starts its storage, else `alias`
  // itself while its layout is faithful. `what` names the input in the error for a layout
  // that cannot be reproduced (a written storage not laid out densely from its start).
  struct StridedInput {
    int base = -1;
    Value* value = nullptr;
  };
  absl::StatusOr<StridedInput> AsStridedInput(int alias, absl::string_view what);
  // True once the storage of `alias` was written (through any of its aliases).
  bool Written(int alias) const;
  // Graph inputs whose storage was written, in input order, with the root's final value.
  std::vector<std::pair<Value*, Value*>> WrittenInputs() const;

 private:
  struct Storage {
    Value* value = nullptr;  // the root tensor's current value
    int version = 0;
    bool starts_storage = false;
    std::vector<int64_t> traced_sizes;    // of the root as traced
    std::vector<int64_t> traced_strides;  // (empty: contiguous)
    std::string uncertain;
    Value* input = nullptr;  // the graph input owning this storage, if any
    bool written = false;
    bool faithful = true;  // see LayoutIsFaithful
  };
  struct Alias {
    int storage = 0;
    int parent = -1;  // -1: the storage's root
    const Node* view = nullptr;
    int result_index = 0;
    Value* value = nullptr;
    int version = 0;
  };

  // The root's memory as traced (StorageBase); `back`, when not empty, permutes `value`
  // back to the root's shape. `for_write`: a contiguous tensor even while faithful (to
  // scatter into).
  struct RootMemory {
    Value* value = nullptr;
    std::vector<int64_t> back;
  };
  absl::StatusOr<RootMemory> MemoryOf(int root, bool for_write);
  // Emits the write of `updated` (a new value for `alias`) into `parent_value`.
  absl::StatusOr<Value*> Inverse(const Alias& alias, Value* parent_value, Value* updated);
  Node* Emit(std::string op, std::vector<NodeArg> args, const Type& type, const std::string& hint);

  Graph* graph_;
  std::function<void(Node*)> hook_;
  std::vector<Storage> storages_;
  std::vector<Alias> aliases_;
};

}  // namespace magi

#endif  // MAGI_FRONTEND_COMMON_ALIAS_TRACKER_H_
