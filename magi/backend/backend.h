// The interface every execution backend implements (interpreter, NCCL multi-stream
// runtime, later Inductor-compatible and fused-kernel backends).
//
// A backend says which nodes of a graph it can run (GetCapability) and compiles a
// graph it is given into an Executable. Deciding what goes where belongs to the
// framework, which depends on no backend library. Backends register with the registry
// under their name ("interpreter"); this header has no LibTorch dependency, the
// LibTorch-facing run interface is magi/runtime/torch_executable.h.
#ifndef MAGI_BACKEND_BACKEND_H_
#define MAGI_BACKEND_BACKEND_H_

#include <memory>
#include <string>
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
};

// A compiled graph. Concrete types add the run interface (see TorchExecutable).
class Executable {
 public:
  virtual ~Executable() = default;
  virtual absl::string_view backend_name() const = 0;
};

class Backend {
 public:
  static constexpr absl::string_view kRegistryKind = "backend";

  virtual ~Backend() = default;
  virtual absl::string_view name() const = 0;
  virtual Capability GetCapability(const Module& module, const Graph& graph) const = 0;
  // Compiles `graph` (a graph of `module`). Fails, naming the node, if the backend
  // cannot run some node.
  virtual absl::StatusOr<std::unique_ptr<Executable>> Compile(const Module& module, const Graph& graph) const = 0;
};

}  // namespace magi

#endif  // MAGI_BACKEND_BACKEND_H_
