#include "examples/train_checkpoints.h"

#include <cstdio>
#include <optional>

#include "absl/strings/str_cat.h"
#include "examples/train_report.h"

namespace magi::examples {

absl::Status TrainCheckpoints::RefuseEarlierRun() const {
  absl::StatusOr<std::optional<CommittedStep>> earlier = FindNewestCommittedStep(dir_);
  if (!earlier.ok()) return earlier.status();
  if (!earlier->has_value()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat((*earlier)->dir, " is a committed checkpoint of an earlier run (step ", (*earlier)->manifest.step(),
                   "): pass --resume to continue it, or another --out_dir (or remove ", dir_, ") to start anew"));
}

absl::StatusOr<int> TrainCheckpoints::Resume(FsdpTrainer& trainer, int rank, int writers, int world, int local,
                                             int steps) {
  absl::Status loaded = trainer.LoadCheckpoint(dir_, options_.config);
  if (!loaded.ok()) return loaded;
  const int first_step = static_cast<int>(trainer.steps_taken());
  committed_step_ = first_step;
  if (rank != 0) return first_step;
  std::fprintf(stderr, "magi: resumed from %s/%s at step %d\n", dir_.c_str(), StepFolderName(first_step).c_str(),
               first_step);
  // The step the ranks agreed on and loaded (rank 0 cleaned up after the load; no rank
  // writes before the first save). Rank 0 alone prints and writes the summary.
  absl::StatusOr<std::optional<CommittedStep>> loaded_step = FindNewestCommittedStep(dir_);
  if (loaded_step.ok() && loaded_step->has_value() && (*loaded_step)->manifest.step() == first_step) {
    resumed_world_size_ = (*loaded_step)->manifest.world_size();
    resumed_global_batch_ = (*loaded_step)->manifest.global_batch();
    std::string note = ResumeNote(resumed_world_size_, resumed_global_batch_, writers, world, local, first_step, steps);
    if (!note.empty()) std::fprintf(stderr, "magi: %s\n", note.c_str());
  } else {
    std::fprintf(stderr,
                 "magi: warning: cannot read the manifest of step %d again (%s): the summary records no "
                 "checkpoint world size or global batch\n",
                 first_step,
                 !loaded_step.ok()           ? std::string(loaded_step.status().message()).c_str()
                 : !loaded_step->has_value() ? "no committed step is there now"
                                             : "another step is the newest now");
  }
  return first_step;
}

absl::Status TrainCheckpoints::Save(FsdpTrainer& trainer) {
  if (trainer.steps_taken() == committed_step_) return absl::OkStatus();  // nothing new
  absl::Status saved = trainer.SaveCheckpoint(dir_, options_);
  if (saved.ok()) committed_step_ = trainer.steps_taken();
  return saved;
}

}  // namespace magi::examples
