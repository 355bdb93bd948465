// The memory peak a recompute rewrite would give, without making it.
//
// AutoRecompute looks for the shortest prefix of its ranked candidates whose rewrite
// (RecomputeForBackward) fits the budget: a binary search of a dozen probes, each of
// which used to rewrite the graph, plan its memory (liveness of every value) and undo
// the rewrite. RecomputePeakProbe precomputes the graph's storage lifetimes once and
// then derives, for any chosen set, the lifetimes the rewritten graph would have:
//  - a recomputed forward value's storage now dies after its last forward use;
//  - each copy (inserted right before the first backward use of its value, operand
//    copies first, as RecomputeForBackward does) owns new storage until the last
//    backward use of the value it replaces (through backward views of it) or the last
//    copy that reads it;
//  - the values a copy reads that are not recomputed (saved activations, graph inputs,
//    parameters gathered again for backward) live at least until the copy;
// and sweeps them as PlanMemory does. The result is the peak PlanMemory reports on the
// rewritten graph (recompute_probe_test checks it prefix by prefix on real steps); a
// probe costs one pass over the backward reads and the storages instead of a rewrite
// and a liveness analysis.
//
// The graph must not change between Build and the last Peak.
#ifndef MAGI_PASSES_RECOMPUTE_PROBE_H_
#define MAGI_PASSES_RECOMPUTE_PROBE_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "magi/ir/graph.h"

namespace magi {

class RecomputePeakProbe {
 public:
  // FailedPrecondition/OutOfRange as PlanMemory (dynamic or oversized values).
  static absl::StatusOr<RecomputePeakProbe> Build(const Graph& graph);
  // The same with the program order given (`nodes` is graph.nodes()).
  static absl::StatusOr<RecomputePeakProbe> Build(const Graph& graph, const std::vector<Node*>& nodes);

  // The peak of `graph` after RecomputeForBackward(graph, chosen) (forward nodes of the
  // graph; views of them are added as the rewrite adds them).
  int64_t Peak(const std::vector<Node*>& chosen) const;

 private:
  struct BackwardRead {  // a backward node reading a value made in forward
    int user;
    const Value* value;
    int producer;
  };
  struct Regather {
    int storage;
    int producer;
  };

  RecomputePeakProbe() = default;
  int IndexOf(const Node* node) const { return index_.at(node); }
  // The last program index (before the rewrite) that needs storage `storage` once the
  // nodes marked in `recomputed` are recomputed: backward reads of recomputed values
  // (and everything behind backward views of them) move to the copies.
  int DeathAfterRewrite(int storage, const std::vector<char>& recomputed) const;

  int n_ = 0;
  int boundary_ = -1;
  std::vector<const Node*> nodes_;
  absl::flat_hash_map<const Node*, int> index_;
  std::vector<int64_t> bytes_;       // per storage
  std::vector<int> born_, dies_;     // per storage, as liveness has them
  std::vector<int> owner_producer_;  // per storage: program index of the owner's producer (-1: input)
  std::vector<const Value*> owner_;  // per storage: the value that owns it
  std::vector<int> hold_;            // per node: where it holds its operands (a start: its wait)
  std::vector<char> is_view_;        // per node: a view op (its results share operand 0's storage)
  absl::flat_hash_map<const Value*, bool> outputs_;
  absl::flat_hash_map<const Value*, int> storage_of_;
  std::vector<std::vector<int>> forward_views_;   // per node before the boundary: the views of its results there
  std::vector<BackwardRead> backward_reads_;      // in program order of the user, then operand order
  absl::flat_hash_map<const Value*, int> backward_hold_;  // last hold by backward users, through backward views
  absl::flat_hash_map<const Value*, Regather> regathers_;
};

}  // namespace magi

#endif  // MAGI_PASSES_RECOMPUTE_PROBE_H_
