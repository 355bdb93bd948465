// Times a collective through the step's own communicator, start + wait (as in a step where
// nothing overlaps it), with every rank in lockstep: every rank calls this for the same
// collectives in the same order (magi/calibration/rank_agreement.h makes sure of that).
//
//   MAGI_ASSIGN_OR_RETURN(std::optional<Timing> timing,
//                         MeasureCollective(options, log, plan, slots, request.issues));
//
// Each run follows as much compute as the step runs before the collective (the same work
// on every rank): on the 2-core machine, 9 Gloo all-gathers of a layer's parameters took
// 6.4 ms back to back but 32-35 ms after 30-100 ms of compute (the ranks drift apart, and
// threads that ran long wake up late on shared cores), and in the step they took what the
// latter predicts. On CPU a collective runs collective_runs times, then as many more as
// seconds_per_collective allows (up to max_collective_runs): a run there either takes the
// transport's time or stalls for a scheduler slice, and 18 runs' mean left the tiny step's
// first prediction 17% off (RMS over 6 runs) where 80 left it 7%.
//
// What it does NOT do: time a collective over one rank on CUDA (nccl_stream skips it; the
// formula stays: IsOneRankCollectiveOnCuda), or overlap (a collective's time is its own;
// the simulator overlaps it).
#ifndef MAGI_CALIBRATION_COLLECTIVE_TIMING_H_
#define MAGI_CALIBRATION_COLLECTIVE_TIMING_H_

#include <ATen/ATen.h>

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/backend/common/step_plan.h"
#include "magi/backend/kernel_calibrator.h"
#include "magi/calibration/kernel_timing.h"
#include "magi/calibration/options.h"

namespace magi::calibration {

// Each run: as much compute as the step runs before the collective (at most
// options.max_compute_before_seconds; the same work on every rank, a loop of small
// matmuls), then the collective, timed from its start to the end of its wait. On CPU, a
// collective the schedule overlaps with compute runs with as much compute (the same
// bound) between its start and its wait, and is timed to when its results were there
// (CollectiveHandle::timing; the wait's end where it blocked), as a profiled step times
// it. A key issued at several places (`issues`) is timed at each in turn: the issues,
// ordered by their compute, fall into at most 6 groups of adjacent ones, each run takes
// the next group's mean compute, and the time is the groups' means weighted by their
// sizes. Run 0 warms the transport up and is not counted. `slots` hold the collective's
// synthesized inputs. nullopt (logged) when no communicator serves plan.group (the same
// on every rank); an error when the collective fails (its peers may wait on it).
absl::StatusOr<std::optional<Timing>> MeasureCollective(const TorchKernelCalibratorOptions& options, FailureLog& log,
                                                        const NodePlan& plan, const std::vector<at::Tensor>& slots,
                                                        std::vector<CollectiveIssue> issues);

// A collective start over a group of one rank, calibrated for CUDA: nccl_stream skips it
// (its results are its inputs), so the cost model's formula (launch overhead only) is what
// such a CUDA step pays.
bool IsOneRankCollectiveOnCuda(const TorchKernelCalibratorOptions& options, const Node& node);

}  // namespace magi::calibration

#endif  // MAGI_CALIBRATION_COLLECTIVE_TIMING_H_
