// The files of a committed-step checkpoint, without collectives (checkpoint.h runs the
// protocol across ranks on top of these).
//
//   <root>/step-00000006/rank0.pt        one LibTorch archive per rank: its shards, its own
//   <root>/step-00000006/rank1.pt        tensors and "magi.step"
//   <root>/step-00000006/manifest.json   the commit marker (checkpoint_manifest.proto)
//
// A step folder without manifest.json was never committed and is never read. Files are
// written through AtomicFileWriter (temp file, fsync, rename, fsync of the folder); every
// step that changes the disk is a crash point (magi/base/crash_points.h).
//
// Sharded tensors use FSDP's layout: rank r of W holds rows [r*R, (r+1)*R) of the full
// tensor zero-padded on dim 0 to R*W rows, R = ShardRows(rows, W). ReadRankState builds
// any rank's rows for any world size from them (like PyTorch DCP's resharding on load).
#ifndef MAGI_TRAINING_CHECKPOINT_FILES_H_
#define MAGI_TRAINING_CHECKPOINT_FILES_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "magi/training/checkpoint_manifest.pb.h"

namespace magi {

inline constexpr char kCheckpointFormat[] = "magi-checkpoint-v1";
inline constexpr char kManifestFile[] = "manifest.json";

// What one rank saves, or (as `like`) what it wants to load: names, dtypes, shapes and
// the devices to load onto.
struct RankState {
  int64_t step = 0;
  std::map<std::string, at::Tensor> sharded;                // this rank's rows of a full tensor
  std::map<std::string, std::vector<int64_t>> full_shapes;  // the full shape of each sharded tensor
  std::map<std::string, at::Tensor> per_rank;               // this rank's own whole tensors
};

// "step-00000006".
std::string StepFolderName(int64_t step);

// CRC-32C (hex) of `config` and the layout of `state`'s tensors (names, dtypes, full
// shapes, sharded or per rank): equal for the same model at any world size.
std::string ModelHash(const RankState& state, const std::string& config);

struct WrittenFile {
  int64_t bytes = 0;
  uint32_t crc32c = 0;
};

// Writes `state` (tensors copied to the CPU, plus "magi.step") to `path` atomically and
// returns the size and CRC-32C of what it wrote.
absl::StatusOr<WrittenFile> WriteRankFile(const std::string& path, const RankState& state);

// The manifest of a step that ranks 0..n-1 wrote as `files`; `state` (any rank's) gives
// the layout. manifest_crc32c is filled by WriteManifest.
proto::CheckpointManifest MakeManifest(const RankState& state, const std::string& config,
                                       const std::vector<WrittenFile>& files);

// Writes `manifest` (its CRC filled in) as <step_dir>/manifest.json atomically: the commit.
absl::Status WriteManifest(const std::string& step_dir, proto::CheckpointManifest manifest);

struct CommittedStep {
  std::string dir;  // the step's folder
  proto::CheckpointManifest manifest;
};

// The newest committed step under `root`; nullopt when there is none (or no `root`).
// DataLoss naming the file when the newest manifest is corrupt: it is never skipped
// silently (move it away to resume from the step before).
absl::StatusOr<std::optional<CommittedStep>> FindNewestCommittedStep(const std::string& root);

// This rank's state (of `world` ranks) from `step`, resharded when the checkpoint has
// another world size: sharded tensors get this rank's rows of the full tensor, per-rank
// tensors come from the same rank, or from rank 0 for ranks the checkpoint did not have.
// Every file read is checked against the manifest's size and CRC first (DataLoss naming
// the file). `like` must match the checkpoint's tensors (InvalidArgument naming the first
// difference: another model) and `config`, unless nullopt, its config (FailedPrecondition
// naming both);
// with `allow_unused`, tensors of the checkpoint that `like` lacks are skipped (inference
// reads parameters without optimizer state).
absl::StatusOr<RankState> ReadRankState(const CommittedStep& step, const RankState& like,
                                        const std::optional<std::string>& config,
                                        int64_t world, int64_t rank, bool allow_unused = false);

// Removes, under `root`, what no committed step needs: temporaries (*.tmp.*), folders of
// steps that were never committed, and all committed steps but the newest `keep_last`
// (0: keep all). A step is uncommitted (its manifest removed) before its files go, so a
// crash midway leaves only uncommitted leftovers. Call only while no rank writes there.
// Returns what it removed, relative to `root`, in order: "step-00000004/" for a step
// folder (uncommitted or pruned), "step-00000003/rank1.pt.tmp.4242" for a temporary.
absl::StatusOr<std::vector<std::string>> CleanCheckpointRoot(const std::string& root, int keep_last);

}  // namespace magi

#endif  // MAGI_TRAINING_CHECKPOINT_FILES_H_
