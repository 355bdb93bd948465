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
// "reshard-after-forward{mode=keep|reshard,groups=layers.0+root,except=layers.3}" (mode
// reshard by default, and always printed).
#ifndef MAGI_PASSES_RESHARD_AFTER_FORWARD_H_
#define MAGI_PASSES_RESHARD_AFTER_FORWARD_H_

#include <set>
#include <string>

#include "magi/passes/pass.h"
#include "magi/passes/pass_options.h"

namespace magi {

struct ReshardAfterForwardOptions : PassOptions<ReshardAfterForwardOptions> {
  bool reshard = true;          // mode=reshard (true) or mode=keep
  std::set<std::string> groups;  // module paths ("" is the root group, `root` in text); all when empty
  std::set<std::string> except;  // module paths left out

  static const OptionSchema<ReshardAfterForwardOptions>& Schema();
};

class ReshardAfterForward : public GraphPass {
 public:
  using Options = ReshardAfterForwardOptions;
  static constexpr absl::string_view kName = "reshard-after-forward";

  explicit ReshardAfterForward(Options options = {}) : options_(std::move(options)) {}
  absl::string_view name() const override { return kName; }
  std::string PrintOptions() const override { return options_.Print(); }

 protected:
  absl::StatusOr<bool> RunOnGraph(Graph& graph) override;

 private:
  bool Selected(const Node& start) const;
  bool Keep(Graph& graph) const;
  bool Reshard(Graph& graph) const;

  Options options_;
};

}  // namespace magi

#endif  // MAGI_PASSES_RESHARD_AFTER_FORWARD_H_
