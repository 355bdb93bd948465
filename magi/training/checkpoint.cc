#include "magi/training/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize.h>

#include <cstdio>
#include <filesystem>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "magi/base/crash_points.h"
#include "magi/base/file.h"
#include "magi/base/status_macros.h"
#include "magi/compat/torch_status.h"
#include "magi/passes/fsdp/shard_for_fsdp.h"

namespace magi {
namespace {

namespace fs = std::filesystem;

// Every rank's `values` (the same count on each), by rank of `communicator`: an
// all-gather, which is also a barrier.
absl::StatusOr<std::vector<std::vector<int64_t>>> ExchangeOn(Communicator& communicator, const at::Device& device,
                                                             const std::vector<int64_t>& values) {
  at::Tensor mine = at::tensor(values, at::TensorOptions().dtype(at::kLong)).to(device);
  MAGI_ASSIGN_OR_RETURN(auto handle, communicator.Start(CollectiveKind::kAllGather, {mine}, "sum"));
  MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> gathered, handle->Wait());
  at::Tensor all = gathered.at(0).cpu().contiguous();
  const int64_t n = static_cast<int64_t>(values.size());
  if (all.numel() != n * communicator.size()) {
    return absl::InternalError(absl::StrCat("checkpoint exchange: ", all.numel(), " values from ", communicator.size(),
                                            " ranks of ", n));
  }
  std::vector<std::vector<int64_t>> out(communicator.size());
  const int64_t* data = all.data_ptr<int64_t>();
  for (int r = 0; r < communicator.size(); ++r) out[r].assign(data + r * n, data + (r + 1) * n);
  return out;
}

// Every mesh rank's `values`, by mesh rank: an all-gather over the shard axis, then one
// of its results over the replicate axis. The barrier of the protocol: it returns on no
// rank before every rank of the mesh has entered it.
absl::StatusOr<std::vector<std::vector<int64_t>>> Exchange(const CheckpointMesh& mesh, const at::Device& device,
                                                           const std::vector<int64_t>& values) {
  MAGI_ASSIGN_OR_RETURN(auto shards, ExchangeOn(*mesh.shard, device, values));
  if (mesh.replicate == nullptr) return shards;
  std::vector<int64_t> flat;
  for (const auto& one : shards) flat.insert(flat.end(), one.begin(), one.end());
  MAGI_ASSIGN_OR_RETURN(auto replicas, ExchangeOn(*mesh.replicate, device, flat));
  std::vector<std::vector<int64_t>> out;
  const size_t n = values.size();
  for (const auto& replica : replicas) {
    for (size_t s = 0; s < shards.size(); ++s) out.emplace_back(replica.begin() + s * n, replica.begin() + (s + 1) * n);
  }
  return out;
}

uint32_t HexValue(const std::string& hex) {
  uint64_t value = 0;
  return absl::SimpleHexAtoi(hex, &value) ? static_cast<uint32_t>(value) : 0;
}

std::string Hex(int64_t value) { return absl::StrFormat("%08x", static_cast<uint32_t>(value)); }

// The first failing rank's error: this rank's own message if it failed, else one naming it.
absl::Status FirstFailure(const std::vector<std::vector<int64_t>>& all, size_t ok_index, int rank,
                          const absl::Status& own, const std::string& what) {
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r][ok_index] != 0) continue;
    if (static_cast<int>(r) == rank) return own;
    return absl::AbortedError(absl::StrCat("rank ", r, " could not ", what, " (its own error says why)"));
  }
  return absl::OkStatus();
}

// Creates `dir` if missing. A crash point either way, so that every rank reaches the same
// crash points whichever rank creates the folder first.
absl::Status MakeFolder(const std::string& dir) {
  CrashPoint(absl::StrCat("mkdir ", dir));
  std::error_code error;
  if (fs::is_directory(dir, error)) return absl::OkStatus();
  fs::create_directories(dir, error);
  if (error && !fs::is_directory(dir)) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", error.message()));
  return absl::OkStatus();
}

// Rank 0's cleanup after a commit or a load: a failure there loses nothing committed, so
// it is reported and training goes on.
void CleanOrWarn(const std::string& root, int keep_last) {
  absl::Status cleaned = CleanCheckpointRoot(root, keep_last).status();
  if (!cleaned.ok()) std::fprintf(stderr, "magi: warning: cleaning %s: %s\n", root.c_str(), cleaned.ToString().c_str());
}

// Rank 0's cleanup before a save: what a save killed midway left (temporaries, step
// folders without a manifest) goes, and the user is told, before any rank writes. Left in
// place, an uncommitted step-N/ would be written into by this run's save of step N and
// keep the killed run's files (rank files of a larger world) inside the committed step.
absl::Status RemoveLeftovers(const std::string& root, int64_t step) {
  absl::StatusOr<std::vector<std::string>> removed = CleanCheckpointRoot(root, /*keep_last=*/0);
  if (!removed.ok()) {
    return absl::Status(removed.status().code(),
                        absl::StrCat("cannot remove what an interrupted save left under ", root,
                                     " before saving step ", step, ": ", removed.status().message()));
  }
  if (!removed->empty()) {
    std::fprintf(stderr, "magi: removed what an interrupted save left under %s before saving step %lld: %s\n",
                 root.c_str(), static_cast<long long>(step), absl::StrJoin(*removed, ", ").c_str());
  }
  return absl::OkStatus();
}

}  // namespace

at::Tensor ShardOf(const at::Tensor& full_param, int64_t world, int rank) {
  at::Tensor full = full_param.detach().to(at::kFloat);
  int64_t rows = ShardRows(full.size(0), world);
  std::vector<int64_t> pad(2 * full.dim(), 0);
  pad.back() = rows * world - full.size(0);
  return at::constant_pad_nd(full, pad, 0).narrow(0, rank * rows, rows).clone();
}

int64_t CheckpointMesh::size() const { return shard->size() * (replicate != nullptr ? replicate->size() : 1); }

int64_t CheckpointMesh::rank() const {
  return (replicate != nullptr ? replicate->rank() : 0) * int64_t{shard->size()} + shard->rank();
}

bool CheckpointMesh::writes_files() const { return replicate == nullptr || replicate->rank() == 0; }

absl::Status SaveCommittedCheckpoint(const std::string& root, const RankState& state, const CheckpointMesh& mesh,
                                     const at::Device& device, const CheckpointOptions& options) {
  CrashPointScope crash_points;
  const int64_t rank = mesh.rank();
  const int shard_rank = mesh.shard->rank();
  const std::string dir = (fs::path(root) / StepFolderName(state.step)).string();
  const std::string model_hash = ModelHash(state, options.config);
  std::error_code error;
  const bool committed = fs::exists(fs::path(dir) / kManifestFile, error);

  // 0. Rank 0 removes what an earlier save killed midway left; no rank writes before the
  // exchange below, which rank 0 joins only after this.
  absl::Status cleaned = rank == 0 ? RemoveLeftovers(root, state.step) : absl::OkStatus();

  // 1. The ranks agree on what they save.
  MAGI_ASSIGN_OR_RETURN(auto plans,
                        Exchange(mesh, device, {state.step, HexValue(model_hash), committed, cleaned.ok() ? 1 : 0}));
  MAGI_RETURN_IF_ERROR(FirstFailure(plans, 3, static_cast<int>(rank), cleaned,
                                    absl::StrCat("remove what an interrupted save left under ", root,
                                                 ": nothing is saved")));
  for (size_t r = 0; r < plans.size(); ++r) {
    if (plans[r][0] != plans[0][0] || plans[r][1] != plans[0][1]) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ranks save different checkpoints: rank 0 step ", plans[0][0], " (model hash ", Hex(plans[0][1]), "), rank ",
          r, " step ", plans[r][0], " (model hash ", Hex(plans[r][1]), ")"));
    }
    if (plans[r][2] != 0) {
      return absl::AlreadyExistsError(absl::StrCat("step ", state.step, " is already committed in ", dir, " (rank ", r,
                                                   " sees its manifest); a committed step is never rewritten"));
    }
  }

  // 2. Every rank of replica 0 writes and syncs its own file, then every rank reports: the
  // barrier. (Other replicas hold the same shards; one writer per file.)
  const bool writes = mesh.writes_files();
  std::string file = (fs::path(dir) / absl::StrCat("rank", shard_rank, ".pt")).string();
  absl::StatusOr<WrittenFile> written = [&]() -> absl::StatusOr<WrittenFile> {
    if (!writes) return WrittenFile{};
    MAGI_RETURN_IF_ERROR(MakeFolder(root));
    MAGI_RETURN_IF_ERROR(MakeFolder(dir));
    MAGI_RETURN_IF_ERROR(SyncDirectory(root));
    return WriteRankFile(file, state);
  }();
  std::vector<int64_t> report = {written.ok() ? 1 : 0, written.ok() ? written->bytes : 0,
                                 written.ok() ? written->crc32c : 0};
  MAGI_ASSIGN_OR_RETURN(auto reports, Exchange(mesh, device, report));
  MAGI_RETURN_IF_ERROR(FirstFailure(reports, 0, static_cast<int>(rank), written.status(),
                                    absl::StrCat("write its file of step ", state.step, " in ", dir,
                                                 ": the step is not committed")));

  // 3. Rank 0 commits: the manifest, with the size and checksum of each file (replica 0's
  // reports, the first shard-size entries).
  absl::Status commit = absl::OkStatus();
  if (rank == 0) {
    std::vector<WrittenFile> files;
    for (int s = 0; s < mesh.shard->size(); ++s) files.push_back({reports[s][1], static_cast<uint32_t>(reports[s][2])});
    proto::CheckpointManifest manifest = MakeManifest(state, options.config, files);
    manifest.set_global_batch(options.global_batch);
    commit = WriteManifest(dir, std::move(manifest));
  }
  MAGI_ASSIGN_OR_RETURN(auto commits, Exchange(mesh, device, {commit.ok() ? 1 : 0}));
  MAGI_RETURN_IF_ERROR(FirstFailure(commits, 0, static_cast<int>(rank), commit,
                                    absl::StrCat("commit step ", state.step, " in ", dir)));

  // 4. No rank writes under `root` until the next save's first exchange, which rank 0
  // joins only after this.
  if (rank == 0) CleanOrWarn(root, options.keep_last);
  return absl::OkStatus();
}

absl::StatusOr<RankState> LoadCommittedCheckpoint(const std::string& root, const RankState& like,
                                                  const std::optional<std::string>& config,
                                                  const CheckpointMesh& mesh, const at::Device& device,
                                                  CheckpointUse use) {
  const int rank = static_cast<int>(mesh.rank());
  absl::StatusOr<std::optional<CommittedStep>> found = FindNewestCommittedStep(root);
  absl::StatusOr<RankState> state = absl::UnknownError("not read");
  int64_t step = -1, manifest_crc = 0;
  if (!found.ok()) {
    state = found.status();
  } else if (!found->has_value()) {
    std::error_code error;
    bool legacy = fs::exists(fs::path(root) / "rank0.pt", error);
    state = absl::NotFoundError(absl::StrCat(
        "no committed checkpoint under ", root,
        legacy ? " (it holds rank<r>.pt files of the per-rank format Magi wrote before, which has no commit record: "
                 "their steps cannot be checked to agree, so they are not resumed)"
               : ""));
  } else {
    step = (*found)->manifest.step();
    manifest_crc = HexValue((*found)->manifest.manifest_crc32c());
    state = ReadRankState(**found, like, config, mesh.shard->size(), mesh.shard->rank(),
                          /*allow_unused=*/use == CheckpointUse::kReadOnly);
  }
  const bool not_found = !state.ok() && state.status().code() == absl::StatusCode::kNotFound && step < 0;
  // Before anything else runs, the ranks compare what they found.
  MAGI_ASSIGN_OR_RETURN(auto all, Exchange(mesh, device, {step, manifest_crc, state.ok() || not_found ? 1 : 0}));
  MAGI_RETURN_IF_ERROR(FirstFailure(all, 2, rank, state.status(), absl::StrCat("load its checkpoint from ", root)));
  bool agree = true;
  for (const auto& r : all) agree &= r[0] == all[0][0] && r[1] == all[0][1];
  if (!agree) {
    std::vector<std::string> seen;
    for (size_t r = 0; r < all.size(); ++r) {
      seen.push_back(all[r][0] < 0 ? absl::StrCat("rank ", r, " has none")
                                   : absl::StrCat("rank ", r, " has step ", all[r][0], " (manifest ", Hex(all[r][1]), ")"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "the ranks disagree on the newest committed checkpoint under ", root, ": ", absl::StrJoin(seen, ", "),
        "; every rank must see the same checkpoint folder (a shared file system)"));
  }
  if (!state.ok()) return state.status();  // NotFound on every rank
  if (rank == 0 && use == CheckpointUse::kResume) CleanOrWarn(root, /*keep_last=*/0);
  return state;
}

absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> ReadArchiveTensors(const std::string& path) {
  using Tensors = std::vector<std::pair<std::string, at::Tensor>>;
  return compat::CallTorch(absl::StatusCode::kNotFound, absl::StrCat("cannot read checkpoint ", path),
                           [&]() -> absl::StatusOr<Tensors> {
                             torch::serialize::InputArchive archive;
                             archive.load_from(path);
                             Tensors tensors;
                             for (const std::string& key : archive.keys()) {
                               at::Tensor tensor;
                               if (!archive.try_read(key, tensor)) {
                                 return absl::InvalidArgumentError(
                                     absl::StrCat(path, ": entry '", key, "' is not a tensor"));
                               }
                               tensors.emplace_back(key, tensor.cpu().contiguous());
                             }
                             return tensors;
                           });
}

namespace {

constexpr char kRngKey[] = "magi.rng.cpu";
constexpr const char* kStateSuffixes[] = {".shard", ".exp_avg", ".exp_avg_sq"};

}  // namespace

RankState TrainerRankState(int64_t step, const std::map<std::string, at::Tensor>& state,
                           const std::map<std::string, std::vector<int64_t>>& full_shapes,
                           const std::map<std::string, at::Tensor>& buffers) {
  RankState out;
  out.step = step;
  for (const auto& [param, shape] : full_shapes) {
    for (const char* suffix : kStateSuffixes) {
      std::string name = param + suffix;
      out.sharded[name] = state.at(name);
      out.full_shapes[name] = shape;
    }
  }
  for (const auto& [name, tensor] : buffers) out.per_rank["buffer." + name] = tensor;
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  out.per_rank[kRngKey] = generator.get_state();
  return out;
}

absl::StatusOr<int64_t> RestoreTrainerRankState(RankState loaded, std::map<std::string, at::Tensor>& state,
                                                std::map<std::string, at::Tensor>& buffers) {
  auto take = [](std::map<std::string, at::Tensor>& from, const std::string& name) -> absl::StatusOr<at::Tensor> {
    auto it = from.find(name);
    if (it == from.end()) return absl::InvalidArgumentError(absl::StrCat("the checkpoint has no tensor ", name));
    return std::move(it->second);
  };
  // Everything is looked up before anything is replaced: a failure leaves the trainer as it was.
  std::map<std::string, at::Tensor> new_state, new_buffers;
  for (const auto& [name, tensor] : state) {
    MAGI_ASSIGN_OR_RETURN(new_state[name], take(loaded.sharded, name));
  }
  for (const auto& [name, tensor] : buffers) {
    MAGI_ASSIGN_OR_RETURN(new_buffers[name], take(loaded.per_rank, "buffer." + name));
  }
  MAGI_ASSIGN_OR_RETURN(at::Tensor rng, take(loaded.per_rank, kRngKey));
  state = std::move(new_state);
  buffers = std::move(new_buffers);
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(rng);
  return loaded.step;
}

}  // namespace magi
