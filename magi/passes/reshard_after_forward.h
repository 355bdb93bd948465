// Reshard-after-forward per FSDP group: re-gather parameters in backward, or keep the
// ones gathered in forward.
//
// mode=keep: a backward all-gather whose every shard was already gathered in forward
// is dropped and backward uses the forward results (more memory between forward and
// backward, one collective fewer).
// mode=reshard: a forward all-gather whose results (or views of them) backward uses
// gets a second all-gather of the same shards right before the first such use, and
// backward reads that instead, so the forward copy is freed after its last forward use.
// Backward uses of forward views (a transposed weight saved for backward) are moved to
// copies of the views on the new gather. If backward already gathers the same shards,
// that gather is moved up to the first such use instead of adding another.
//
// `groups` chooses the FSDP groups by the gather's module path (`+`-separated, `root`
// for the root group); all groups when empty. `except` leaves groups out, so
// "reshard-after-forward{mode=reshard,except=layers.3},reshard-after-forward{groups=layers.3,mode=keep}"
// keeps the last layer gathered without first resharding it (resharding adds copies of
// forward views that a later keep would not remove). Registered as
// "reshard-after-forward{mode=keep|reshard,groups=layers.0+root,except=layers.3}".
#ifndef MAGI_PASSES_RESHARD_AFTER_FORWARD_H_
#define MAGI_PASSES_RESHARD_AFTER_FORWARD_H_

#include <set>
#include <string>

#include "magi/passes/pass.h"

namespace magi {

class ReshardAfterForward : public Pass {
 public:
  ReshardAfterForward(bool reshard, std::set<std::string> groups, std::set<std::string> excluded = {})
      : reshard_(reshard), groups_(std::move(groups)), excluded_(std::move(excluded)) {}
  absl::string_view name() const override { return "reshard-after-forward"; }

 protected:
  absl::StatusOr<bool> RunImpl(Module& module) override;

 private:
  bool Selected(const Node& start) const;
  bool Keep(Graph& graph) const;
  bool Reshard(Graph& graph) const;

  bool reshard_;
  std::set<std::string> groups_;    // module paths; "" is the root
  std::set<std::string> excluded_;  // module paths left out
};

}  // namespace magi

#endif  // MAGI_PASSES_RESHARD_AFTER_FORWARD_H_
