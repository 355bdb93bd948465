// Checkpoints of an FSDP run: one committed step across ranks.
//
//   CheckpointOptions options;  // keep_last = 2, config = "model=tiny"
//   SaveCommittedCheckpoint(root, state, communicator, device, options);
//   absl::StatusOr<RankState> state = LoadCommittedCheckpoint(root, like, "model=tiny", communicator, device);
//
// A save is collective. Rank 0 first removes what an earlier save killed midway left
// (temporaries, uncommitted step folders; it prints what it removed), so that no file of
// another run ends up in the step; then the ranks agree on the step and layout; each
// writes and syncs its own file into <root>/step-<N>/; once every rank has reported its
// file (size and CRC-32C, through an all-gather: the barrier), rank 0 writes
// manifest.json, which commits the step; last, rank 0 drops stale temporaries,
// uncommitted step folders and committed steps beyond `keep_last`. A process killed at
// any moment leaves the last committed step intact and loadable (tested by killing at
// every crash point).
//
// On an HSDP mesh (CheckpointMesh with a replicate communicator) the replicas hold the
// same shards: only replica 0's ranks write files (one per shard rank, so the checkpoint
// is the shard axis' world), only the mesh's rank 0 writes the manifest and cleans, and
// every exchange above spans the whole mesh, so no replica commits, prunes or cleans
// while another writes.
//
// A load is collective too: each rank finds the newest committed step, checks the files
// it reads against the manifest and reads its state (resharded when the world size
// changed), and then the ranks compare what they found (step and manifest checksum)
// before anything else: a disagreement or a failure on any rank fails every rank, before
// any collective of a training step. On a resume, rank 0 then removes stale temporaries
// and uncommitted step folders. See docs/fsdp.md, "Checkpoints".
#ifndef MAGI_TRAINING_CHECKPOINT_H_
#define MAGI_TRAINING_CHECKPOINT_H_

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "magi/comm/communicator.h"
#include "magi/training/checkpoint_files.h"

namespace magi {

// This rank's rows of `full_param`'s dim 0, zero-padded to whole shards, in fp32.
at::Tensor ShardOf(const at::Tensor& full_param, int64_t world, int rank);

struct CheckpointOptions {
  // Committed steps to keep, the newest; 0 keeps all.
  int keep_last = 0;
  // The run's description, stored in the manifest; a resume must give the same.
  std::string config;
  // Samples per optimizer step over all ranks, stored in the manifest (global_batch) so
  // that a resume can say how its own global batch differs; 0 records nothing.
  int64_t global_batch = 0;
};

// The ranks that save or load one checkpoint together. `shard`: the ranks that each hold
// their own shards (the checkpoint's world size is its size); `replicate` (HSDP, may be
// null: a 1-D mesh): the replicas of this rank's shards, which hold the same state. The
// mesh rank is replicate rank * shard size + shard rank, as DeviceMesh numbers a
// {replicate, shard} mesh. Neither communicator is owned; both outlive the call.
struct CheckpointMesh {
  // A 1-D mesh: every rank writes its file. Implicit, so that callers without a
  // replicate axis pass their communicator as before.
  CheckpointMesh(Communicator& shard) : shard(&shard) {}  // NOLINT(google-explicit-constructor)
  CheckpointMesh(Communicator& shard, Communicator* replicate) : shard(&shard), replicate(replicate) {}

  int64_t size() const;  // every rank of the mesh
  int64_t rank() const;  // this rank's mesh rank
  // Whether this rank writes its shard rank's file: replica 0's ranks do.
  bool writes_files() const;

  Communicator* shard;
  Communicator* replicate = nullptr;
};

// Collective over the whole mesh: every rank calls it with its own `state` (same step
// and layout on all). `device` is where the communicators take tensors (CPU for Gloo,
// the rank's GPU for NCCL). AlreadyExists if that step is committed already (a committed
// step is never rewritten); any rank's failure fails every rank and commits nothing.
// Per-rank tensors (buffers, generator state) of replicas other than 0 are not saved: a
// load gives every replica those of replica 0.
absl::Status SaveCommittedCheckpoint(const std::string& root, const RankState& state, const CheckpointMesh& mesh,
                                     const at::Device& device, const CheckpointOptions& options);

// Who loads a checkpoint.
enum class CheckpointUse {
  // The run that writes under `root` resumes: every tensor of the checkpoint must be
  // wanted, and rank 0 then removes stale temporaries and uncommitted step folders.
  kResume,
  // A reader (inference) that may run while a trainer saves there: tensors it does not
  // want (optimizer state) are skipped and nothing is removed (an uncommitted step folder
  // may be the trainer's save in progress).
  kReadOnly,
};

// Collective over the whole mesh: this rank's state from the newest committed step under
// `root`, for a world of mesh.shard->size() ranks (resharded if the checkpoint has
// another), shaped like `like` (see ReadRankState; `config` nullopt skips the config
// check); every replica loads the same files. NotFound when no step is committed;
// FailedPrecondition when the ranks found different steps; DataLoss when a file does not
// match its manifest.
absl::StatusOr<RankState> LoadCommittedCheckpoint(const std::string& root, const RankState& like,
                                                  const std::optional<std::string>& config,
                                                  const CheckpointMesh& mesh, const at::Device& device,
                                                  CheckpointUse use = CheckpointUse::kResume);

// What a trainer (FsdpTrainer, FxTrainer) checkpoints: its step; each parameter's fp32 master
// shard and AdamW moments (`state`: "<param>.shard", "<param>.exp_avg", "<param>.exp_avg_sq",
// sharded over the full shapes in `full_shapes`); its buffers (per rank, as "buffer.<name>");
// and the CPU generator's state, which random ops of the step draw from.
RankState TrainerRankState(int64_t step, const std::map<std::string, at::Tensor>& state,
                           const std::map<std::string, std::vector<int64_t>>& full_shapes,
                           const std::map<std::string, at::Tensor>& buffers);

// The inverse of TrainerRankState for a state loaded in its layout: moves the tensors into
// `state` and `buffers` (the names they already hold), sets the CPU generator and returns
// the step. InvalidArgument naming the tensor if `loaded` lacks one.
absl::StatusOr<int64_t> RestoreTrainerRankState(RankState loaded, std::map<std::string, at::Tensor>& state,
                                                std::map<std::string, at::Tensor>& buffers);

// Every tensor of the archive at `path` (shards, moments, "magi.step", "magi.rng.cpu"), in
// the archive's order, on the CPU: what compare_checkpoints compares. NotFound if the
// file cannot be read.
absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> ReadArchiveTensors(const std::string& path);

}  // namespace magi

#endif  // MAGI_TRAINING_CHECKPOINT_H_
