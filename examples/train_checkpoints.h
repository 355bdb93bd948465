// examples:train's committed-step checkpoints under <out_dir>/checkpoint (magi/training/
// checkpoint.h): a fresh run refuses to write into an earlier run's steps, --resume loads
// the newest committed step (rank 0 says what changed in the data: ResumeNote), and Save
// commits the trainer's current step unless it is committed already.
//
//   magi::examples::TrainCheckpoints checkpoints(out_dir + "/checkpoint", options);
//   MAGI_RETURN_IF_ERROR(checkpoints.RefuseEarlierRun());              // unless resuming
//   int first_step = *checkpoints.Resume(*trainer, rank, shards, world, local, steps);
//   MAGI_RETURN_IF_ERROR(checkpoints.Save(*trainer));                   // collective
#ifndef MAGI_EXAMPLES_TRAIN_CHECKPOINTS_H_
#define MAGI_EXAMPLES_TRAIN_CHECKPOINTS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "magi/frontend/fsdp/trainer.h"
#include "magi/training/checkpoint.h"

namespace magi::examples {

class TrainCheckpoints {
 public:
  // `options.config` is what a resumed run must share with the saving one.
  TrainCheckpoints(std::string dir, CheckpointOptions options) : dir_(std::move(dir)), options_(std::move(options)) {}

  // FailedPrecondition when `dir` holds a committed step: a run that does not resume never
  // writes into another run's checkpoints (its steps would interleave with theirs).
  absl::Status RefuseEarlierRun() const;
  // Collective: loads the newest committed step into `trainer` and returns its step (the
  // first to run). Rank 0 prints where it resumed from and, from the step's manifest, what
  // this run of `world` ranks x `local` samples (`writers` of them write files) changes; a
  // manifest it cannot read again is a warning (the other ranks are past the load already).
  absl::StatusOr<int> Resume(FsdpTrainer& trainer, int rank, int writers, int world, int local, int steps);
  // Collective (every rank at the same step): commits the trainer's current step.
  absl::Status Save(FsdpTrainer& trainer);

  // Of the checkpoint resumed from (0: none, or its manifest could not be read again).
  int64_t resumed_world_size() const { return resumed_world_size_; }
  int64_t resumed_global_batch() const { return resumed_global_batch_; }

 private:
  std::string dir_;
  CheckpointOptions options_;
  int64_t committed_step_ = -1;  // the newest committed step this run knows of
  int64_t resumed_world_size_ = 0, resumed_global_batch_ = 0;
};

}  // namespace magi::examples

#endif  // MAGI_EXAMPLES_TRAIN_CHECKPOINTS_H_
