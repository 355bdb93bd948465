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
// max_mb defaults to 64. Buckets are numbered in the nodes' `bucket` annotation.
#ifndef MAGI_PASSES_BUCKET_COLLECTIVES_H_
#define MAGI_PASSES_BUCKET_COLLECTIVES_H_

#include <optional>

#include "magi/ir/collectives.h"
#include "magi/passes/pass.h"

namespace magi {

class BucketCollectives : public Pass {
 public:
  // `only`: bucket just this kind (all kinds when empty).
  explicit BucketCollectives(double max_mb = 64, std::optional<CollectiveKind> only = std::nullopt)
      : max_bytes_(max_mb * 1e6), only_(only) {}
  absl::string_view name() const override { return "bucket-collectives"; }

  // The bytes a start moves, as the bucket size limit counts them.
  static int64_t BucketBytes(const Node& start);

 protected:
  absl::StatusOr<bool> RunImpl(Module& module) override;

 private:
  double max_bytes_;
  std::optional<CollectiveKind> only_;
};

}  // namespace magi

#endif  // MAGI_PASSES_BUCKET_COLLECTIVES_H_
