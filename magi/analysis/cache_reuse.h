// Which operands a node finds in a core's own cache when a step runs it: the reuse
// distance, in bytes, between the write of an operand's storage and its read.
//
// CPU kernel micro-runs (magi/calibration/cpu_micro_runs.h) time each kernel on
// synthesized inputs, which the previous round left wherever it left them. In a step,
// an operand written just before its consumer (an activation's next op, a gradient's
// chain in backward) is still in the core's cache; one written long before, or a graph
// input (a parameter, an optimizer state: the previous step touched it last), is not.
// Timed with all operands cold, the tiny Llama step's compute came out 9% above what its
// steps measured; with all of them warm, 5% below (this 2-core machine, 2026-12-04).
//
// The model: an operand is in cache when the node's storage producer (views followed back
// to the node that wrote the storage) lies before it in program order and the bytes the
// nodes from that producer up to the consumer read and write (the producer's included,
// views counted as moving nothing) are at most the cache's size. Bytes read twice count
// twice (toward cold); a partition call's inner traffic and values of dynamic size are not
// counted (toward warm); and only writes make an operand warm: a graph input read just
// before (a weight used twice) counts as cold.
//
//   OperandCacheModel model(graph);
//   std::vector<bool> warm = model.OperandsInCache(node, /*cache_bytes=*/1 << 20);
#ifndef MAGI_ANALYSIS_CACHE_REUSE_H_
#define MAGI_ANALYSIS_CACHE_REUSE_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "magi/ir/graph.h"

namespace magi {

class OperandCacheModel {
 public:
  // Walks `graph` once; the graph must outlive the model and not change.
  explicit OperandCacheModel(const Graph& graph);

  // One entry per TENSOR operand of `node` (in operand order; other operands skipped):
  // whether the step finds it in a cache of `cache_bytes`. All false for a node of
  // another graph.
  std::vector<bool> OperandsInCache(const Node& node, int64_t cache_bytes) const;

  // The bytes nodes [0, position) read and write (views: none).
  int64_t BytesTouchedBefore(int position) const { return touched_before_.at(position); }

 private:
  absl::flat_hash_map<const Node*, int> position_;  // program order
  std::vector<int64_t> touched_before_;             // one entry per node, plus one
};

}  // namespace magi

#endif  // MAGI_ANALYSIS_CACHE_REUSE_H_
