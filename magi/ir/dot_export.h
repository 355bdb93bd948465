// Graphviz (DOT) export of a graph, with communication visibly apart from compute.
//
// Compute nodes are light-blue boxes; collective starts are orange hexagons labelled
// with their group and bytes; waits are dashed orange boxes; the edge from a start to
// its wait is a bold orange line. Parameters are green ellipses, other inputs grey.
// Render with `dot -Tsvg graph.dot -o graph.svg`.
#ifndef MAGI_IR_DOT_EXPORT_H_
#define MAGI_IR_DOT_EXPORT_H_

#include <string>

#include "magi/ir/graph.h"

namespace magi {

std::string ExportDot(const Graph& graph);

}  // namespace magi

#endif  // MAGI_IR_DOT_EXPORT_H_
