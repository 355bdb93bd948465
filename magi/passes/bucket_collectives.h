// Collective bucketing: fuses neighbouring collectives into one.
//
// Two starts of the same kind, process group, reduction and dtype that are next to
// each other among that kind's collectives (in program order) become one start over
// both tensor lists, with one wait, while the fused buffer stays within `max_mb`
// megabytes (gathered bytes for all-gathers, input bytes for the rest). Fewer, larger
// collectives pay the per-collective latency once instead of many times, at the cost
// of gathering earlier / reducing later.
//
// Where the fused collective goes: at the earlier start when the later one's inputs
// can be computed there (all-gathers may hoist the casts that feed them), otherwise
// at the later start, which needs the earlier wait's results to be unused until then.
// The fused wait sits before the first use of any result. Pairs that fit neither way
// stay apart. The order of collectives stays the same on every rank because every rank
// runs this pass on the same graph.
//
// Registered as "bucket-collectives{max_mb=N,kinds=all|all_gather|reduce_scatter}";
// max_mb defaults to 64 and is always printed. Buckets are numbered in the nodes' `bucket`
// annotation.
#ifndef MAGI_PASSES_BUCKET_COLLECTIVES_H_
#define MAGI_PASSES_BUCKET_COLLECTIVES_H_

#include <optional>

#include "magi/ir/collectives.h"
#include "magi/passes/pass.h"
#include "magi/passes/pass_options.h"

namespace magi {

struct BucketCollectivesOptions : PassOptions<BucketCollectivesOptions> {
  double max_mb = 64;                   // the fused buffer's limit in megabytes (>= 0)
  std::optional<CollectiveKind> kinds;  // bucket just this kind; every kind when empty

  static const OptionSchema<BucketCollectivesOptions>& Schema();
};

class BucketCollectives : public GraphPass {
 public:
  using Options = BucketCollectivesOptions;
  static constexpr absl::string_view kName = "bucket-collectives";

  explicit BucketCollectives(Options options = {}) : options_(options) {}
  absl::string_view name() const override { return kName; }
  std::string PrintOptions() const override { return options_.Print(); }

  // The bytes a start moves, as the bucket size limit counts them.
  static int64_t BucketBytes(const Node& start);

 protected:
  absl::StatusOr<bool> RunOnGraph(Graph& graph) override;

 private:
  Options options_;
};

}  // namespace magi

#endif  // MAGI_PASSES_BUCKET_COLLECTIVES_H_
