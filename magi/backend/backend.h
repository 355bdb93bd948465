// The interface every execution backend implements (interpreter, NCCL multi-stream
// runtime, Inductor-compatible and fused-kernel backends).
//
// A backend says which nodes of a graph it can run (GetCapability) and compiles a
// graph it is given into an Executable. Deciding what goes where belongs to the
// compiler (magi/compiler), which depends on no backend library: it asks each
// partition backend for its capability, outlines the runs of nodes it accepts into
// graphs of their own (called from the step through `magi::call` nodes), compiles
// those with that backend, and hands the executables to the step's primary backend in
// the CompileContext. Backends register with the registry under their name
// ("interpreter"). This header has no LibTorch dependency; the LibTorch-facing run
// interface is magi/backend/torch_executable.h.
//
//   class MyBackend : public Backend {
//     absl::string_view name() const override { return "mine"; }
//     Capability GetCapability(const Module&, const Graph& g) const override;   // what it declines, and why
//     absl::StatusOr<std::unique_ptr<Executable>> Compile(const Module&, const Graph&,
//                                                         const CompileContext&) const override;
//   };
//   MAGI_REGISTER(Backend, "mine", [](const ComponentOptions&) -> absl::StatusOr<std::unique_ptr<Backend>> {
//     return std::make_unique<MyBackend>();
//   });
//
// docs/backends.md walks through a complete example backend.
#ifndef MAGI_BACKEND_BACKEND_H_
#define MAGI_BACKEND_BACKEND_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "magi/ir/module.h"

namespace magi {

// What a backend can run of a graph.
struct Capability {
  // Nodes the backend cannot run, each with the reason. Empty: the whole graph.
  std::vector<std::pair<const Node*, std::string>> unsupported;
  bool supports_all() const { return unsupported.empty(); }
  bool Supports(const Node* node) const {
    for (const auto& [declined, reason] : unsupported) {
      if (declined == node) return false;
    }
    return true;
  }
};

// A compiled graph. Concrete types add the run interface (see TorchExecutable).
class Executable {
 public:
  virtual ~Executable() = default;
  virtual absl::string_view backend_name() const = 0;
  // Names the compiled code where the backend can (e.g. the inductor package's content
  // hash): executables with equal keys run the same kernels. "": the backend does not say
  // (then the graph it was compiled from and the backend name stand for it). Calibration
  // caches a partition's measured time under it.
  virtual std::string code_key() const { return std::string(); }
};

// What the compiler hands a backend besides the graph.
struct CompileContext {
  // The compiled partitions that `magi::call` nodes of the graph call, by callee graph
  // name. Identical partitions share one executable. Empty when nothing was outlined.
  std::map<std::string, std::shared_ptr<Executable>> callees;
  // Deterministic mode (CompileOptions::deterministic, docs/deterministic.md): the
  // executable must give bitwise-identical results run after run on the same hardware:
  // no autotuning, no nondeterministic kernels, reductions in a fixed order. A backend
  // that cannot promise it fails Compile with FailedPrecondition saying why.
  bool deterministic = false;
};

class Backend {
 public:
  static constexpr absl::string_view kRegistryKind = "backend";

  virtual ~Backend() = default;
  virtual absl::string_view name() const = 0;
  // The nodes of `graph` this backend declines, with reasons. A primary backend (one
  // that runs whole steps) must accept collectives, waits and `magi::call`; a
  // partition backend is only ever given compute nodes.
  virtual Capability GetCapability(const Module& module, const Graph& graph) const = 0;
  // Whether a partition of this backend can take `node`, which writes a donated graph
  // input's new value from that input (a KV cache's aten::index_put), and update the input
  // in place: the partition graph's output then aliases its input (GraphOutput::aliases)
  // and the executable returns that input, written. Default: no; the compile driver leaves
  // such nodes to the primary backend, which updates the input in place itself.
  virtual bool UpdatesDonatedInputInPlace(const Node& node) const { return false; }
  // Compiles `graph` (a graph of `module`). Fails, naming the node, if the backend
  // cannot run some node.
  virtual absl::StatusOr<std::unique_ptr<Executable>> Compile(const Module& module, const Graph& graph,
                                                              const CompileContext& context) const = 0;
  absl::StatusOr<std::unique_ptr<Executable>> Compile(const Module& module, const Graph& graph) const {
    return Compile(module, graph, CompileContext());
  }
  // Compiles the partition graphs `graphs` (graphs of `module` that call nothing), one
  // result per graph in order; a failure is that graph's alone. The compile driver calls
  // it once per partition backend with the distinct partitions, so a backend whose
  // compiles are slow (inductor) can run them in parallel; the default compiles them one
  // after another. `context` is the same for all (partitions call nothing: no callees).
  virtual std::vector<absl::StatusOr<std::unique_ptr<Executable>>> CompileAll(
      const Module& module, const std::vector<const Graph*>& graphs, const CompileContext& context) const {
    std::vector<absl::StatusOr<std::unique_ptr<Executable>>> results;
    results.reserve(graphs.size());
    for (const Graph* graph : graphs) results.push_back(Compile(module, *graph, context));
    return results;
  }
  std::vector<absl::StatusOr<std::unique_ptr<Executable>>> CompileAll(const Module& module,
                                                                      const std::vector<const Graph*>& graphs) const {
    return CompileAll(module, graphs, CompileContext());
  }
};

}  // namespace magi

#endif  // MAGI_BACKEND_BACKEND_H_
