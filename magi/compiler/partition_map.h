// A picture of a partitioned step: which nodes went to which partition (and backend),
// and what stayed with the primary backend, as Graphviz DOT.
//
//   std::string dot = PartitionMapDot(compiled.module(), compiled.graph(), /*compact=*/true);
//   // magi partition-map step.mir -o map.dot --compact=true && dot -Tsvg map.dot -o map.svg
//
// Every magi::call of the step becomes a cluster titled with its callee, backend, node
// count and the module paths and phases (forward / backward / optimizer) of its first
// and last nodes, so a partition that spans a layer boundary or the forward/backward
// boundary shows it. Compact: one box per partition, listing its most frequent ops;
// otherwise every node of the partition inside its cluster. Nodes the primary backend
// runs are drawn as in ExportDot's style: collectives orange hexagons, waits dashed,
// compute grey. Identical partitions (shared executables) get the same colour.
// What it does NOT show: graph inputs (parameters would crowd the picture) and values
// that pass through unchanged. No LibTorch.
#ifndef MAGI_COMPILER_PARTITION_MAP_H_
#define MAGI_COMPILER_PARTITION_MAP_H_

#include <string>

#include "magi/ir/module.h"

namespace magi {

std::string PartitionMapDot(const Module& module, const Graph& step, bool compact);

}  // namespace magi

#endif  // MAGI_COMPILER_PARTITION_MAP_H_
