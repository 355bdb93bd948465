// Writes a partition graph as a Python program that builds a torch.fx.GraphModule of
// torch.ops.aten.* calls: the input of AOTInductor (aoti_compile.py exports it with
// torch.export and compiles it with torch._inductor.aoti_compile_and_package).
//
//   absl::StatusOr<FxProgram> program = EmitFxProgram(*module.FindGraph("train_step.inductor.0"));
//   // program->source:
//   //   import operator
//   //   import torch
//   //   GRAPH = "train_step.inductor.0"
//   //   INPUTS = [("x", torch.float32, [8, 16], [16, 1], "cpu"), ...]
//   //   def build():
//   //       g = torch.fx.Graph()
//   //       x = g.placeholder("x")
//   //       # %h = aten::mm(%x, %w) : f32[8,32]
//   //       h = g.call_function(torch.ops.aten.mm.default, (x, w))
//   //       g.output((h,))
//   //       return torch.fx.GraphModule(torch.nn.Module(), g)
//
// One IR node is one call_function node: the IR's op names and argument lists mirror ATen
// schemas, so `aten::add.Tensor(%a, %b, 2)` becomes a call of torch.ops.aten.add.Tensor
// with args (a, b, 2). Keyword-only arguments of the schema become kwargs
// (`aten::sum.dim_IntList(%x, [1], false, dtype = none)`: kwargs {"dtype": None}); every
// other argument is positional, in schema order.
// Constants are Python literals (dtypes as torch.float32, layouts and memory formats as
// torch.strided / torch.contiguous_format, devices as torch.device("cuda:0")); every
// graph input, parameters included, is a placeholder: nothing is baked into the program.
// Ops with several results (or a list result) are followed by operator.getitem nodes for
// the results that are used.
//
// The graph is built node by node rather than traced: torch.fx.symbolic_trace would run
// calls that take no traced value (aten::zeros, aten::empty_strided) at trace time and
// bake their results in as constants.
//
// What it does NOT do: decide whether AOTInductor can compile an op (the backend's
// capability does), or optimize anything. Needs LibTorch only to read op schemas (which
// arguments are keyword-only, which are dtypes, layouts, memory formats; what an op returns).
#ifndef MAGI_BACKEND_INDUCTOR_FX_PROGRAM_H_
#define MAGI_BACKEND_INDUCTOR_FX_PROGRAM_H_

#include <string>

#include "absl/status/statusor.h"
#include "magi/ir/graph.h"

namespace magi::inductor {

// The version of the program format: part of the cache key of compiled packages, so a
// change to what is emitted must bump it.
inline constexpr int kFxProgramFormat = 1;

struct FxEmitOptions {
  // Values named v0, v1, ... in order, no comments, no graph or module names: the text of
  // two structurally identical partitions is then the same (the cache key hashes it).
  bool canonical = false;
};

struct FxProgram {
  std::string source;  // a Python 3 module (see the file comment)
  int num_ops = 0;     // call_function nodes of torch.ops.aten ops (getitem not counted)
};

// Why `node` cannot be written as one torch.ops.aten call (not an aten op, no such
// operator in this LibTorch, an argument of a type FX programs cannot carry, a non-tensor
// result, ...), or "" when it can.
std::string WhyNotFxExpressible(const Node& node);

// The program of `graph` (see the file comment). InvalidArgument naming the node when a
// node is not expressible (WhyNotFxExpressible) or a value type is not a tensor.
absl::StatusOr<FxProgram> EmitFxProgram(const Graph& graph, const FxEmitOptions& options = {});

// `text` as a Python string literal ("..." with escapes).
std::string PythonString(absl::string_view text);

}  // namespace magi::inductor

#endif  // MAGI_BACKEND_INDUCTOR_FX_PROGRAM_H_
