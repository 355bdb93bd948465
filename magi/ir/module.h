// A module of the IR: the process groups its collectives use and its graphs.
//
// A process group is one axis of the device mesh (for FSDP, the data-parallel
// axis); collectives name it with their `group` argument. The module owns its graphs.
//
//   Module m("llama");
//   m.AddProcessGroup({"dp", "dp", 2, {}});
//   Graph* step = m.AddGraph("step");
#ifndef MAGI_IR_MODULE_H_
#define MAGI_IR_MODULE_H_

#include "absl/strings/string_view.h"
#include <memory>
#include <string>
#include <vector>

#include "magi/ir/graph.h"

namespace magi {

// A communication group: `size` ranks along mesh axis `axis`. `ranks` lists the
// global ranks when they are known statically (empty: decided at run time).
struct ProcessGroup {
  std::string name;
  std::string axis;
  int64_t size = 1;
  std::vector<int64_t> ranks;
  bool operator==(const ProcessGroup& o) const {
    return name == o.name && axis == o.axis && size == o.size && ranks == o.ranks;
  }
};

class Module {
 public:
  explicit Module(std::string name) : name_(std::move(name)) {}
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& name() const { return name_; }

  // Adds a group; a duplicate name is a programmer error (parsers check first).
  const ProcessGroup* AddProcessGroup(ProcessGroup group);
  const ProcessGroup* FindProcessGroup(absl::string_view name) const;
  const std::vector<std::unique_ptr<ProcessGroup>>& process_groups() const { return groups_; }

  // Adds an empty graph; a duplicate name is a programmer error.
  Graph* AddGraph(std::string name);
  Graph* FindGraph(absl::string_view name) const;
  // Removes graph `name` and everything it owns; false when there is none. Nodes that
  // call it (magi::call) must be gone first (the verifier reports calls of missing graphs).
  bool RemoveGraph(absl::string_view name);
  std::vector<Graph*> graphs() const;

 private:
  std::string name_;
  std::vector<std::unique_ptr<ProcessGroup>> groups_;
  std::vector<std::unique_ptr<Graph>> graphs_;
};

}  // namespace magi

#endif  // MAGI_IR_MODULE_H_
