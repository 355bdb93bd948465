// Prints IR modules and graphs as text that ParseModule reads back exactly.
//
//   module @mlp {
//     process_group @dp {axis = "dp", size = 2}
//     graph @step {
//       input %x: f32[8,16]
//       input %fc.weight: f32[16,16] {role = param}
//       %0 = aten::mm(%x, %fc.weight) : f32[8,16] {module = "fc"}
//       output y = %0
//     }
//   }
//
// One statement per line; nodes in program order; argument names only for keyword
// arguments; annotations only when set, in a fixed order (module, stream, sched,
// remat, bucket, phase). Names outside [A-Za-z0-9_.] are quoted: %"a b".
#ifndef MAGI_IR_PRINTER_H_
#define MAGI_IR_PRINTER_H_

#include "absl/strings/string_view.h"
#include <string>

#include "magi/ir/graph.h"
#include "magi/ir/module.h"

namespace magi {

std::string PrintModule(const Module& module);
// A graph alone, indented as inside a module (for dumps and error messages).
std::string PrintGraph(const Graph& graph);
// One node's line, without indentation or newline.
std::string PrintNode(const Node& node);

// A name as text IR writes it after '%' or '@': bare when made of [A-Za-z0-9_.], else quoted.
std::string FormatName(absl::string_view name);

}  // namespace magi

#endif  // MAGI_IR_PRINTER_H_
