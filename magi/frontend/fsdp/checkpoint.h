// What FSDP trainers and inference share about shards and their files: a rank's rows of a
// full parameter, and LibTorch archives of named tensors (written atomically).
#ifndef MAGI_FRONTEND_FSDP_CHECKPOINT_H_
#define MAGI_FRONTEND_FSDP_CHECKPOINT_H_

#include <ATen/ATen.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace magi {

// This rank's rows of `full_param`'s dim 0, zero-padded to whole shards, in fp32.
at::Tensor ShardOf(const at::Tensor& full_param, int64_t world, int rank);

// What a trainer checkpoint holds besides its named tensors.
struct CheckpointExtras {
  int64_t step = 0;
  bool has_rng = false;
  at::Tensor cpu_rng_state;  // the default CPU generator's state
};

// Writes `tensors` (moved to the CPU), the step and the CPU generator's state to `path`:
// a temporary file renamed over `path`, so a reader never sees half a file.
absl::Status SaveShardArchive(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                              int64_t step);

// Reads the tensors named in `like` from `path`: each must exist with the same shape and
// dtype (else InvalidArgument naming it: another model, world size or rank); they are
// moved to the device of their counterpart. NotFound if the file cannot be read.
absl::StatusOr<std::map<std::string, at::Tensor>> LoadShardArchive(const std::string& path,
                                                                    const std::map<std::string, at::Tensor>& like,
                                                                    CheckpointExtras* extras = nullptr);

// Every tensor of the archive at `path` (shards, moments, "magi.step", "magi.rng.cpu"), in
// the archive's order, on the CPU: what compare_checkpoints compares. NotFound if the
// file cannot be read.
absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> ReadArchiveTensors(const std::string& path);

}  // namespace magi

#endif  // MAGI_FRONTEND_FSDP_CHECKPOINT_H_
