#include "magi/training/checkpoint_files.h"

#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/json_util.h>
#include <torch/serialize.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "magi/base/crash_points.h"
#include "magi/base/crc32c.h"
#include "magi/base/file.h"
#include "magi/base/status_macros.h"
#include "magi/compat/torch_status.h"
#include "magi/passes/fsdp/shard_for_fsdp.h"

namespace magi {
namespace {

namespace fs = std::filesystem;

constexpr char kShardDim0[] = "shard_dim0";
constexpr char kPerRank[] = "per_rank";
constexpr char kStepKey[] = "magi.step";
constexpr size_t kWriteChunk = 1 << 20;  // archive bytes per write call

std::string RankFileName(int64_t rank) { return absl::StrCat("rank", rank, ".pt"); }

std::string ShapeString(const std::vector<int64_t>& shape) { return absl::StrCat("[", absl::StrJoin(shape, ","), "]"); }

// The step a folder name stands for ("step-00000006" -> 6), if it is one.
std::optional<int64_t> StepOfFolder(const std::string& name) {
  int64_t step = 0;
  if (!absl::StartsWith(name, "step-") || !absl::SimpleAtoi(name.substr(5), &step) || step < 0) return std::nullopt;
  if (name != StepFolderName(step)) return std::nullopt;
  return step;
}

// Step folders under `root` by step (committed or not); empty if `root` does not exist.
absl::StatusOr<std::map<int64_t, std::string>> StepFolders(const std::string& root) {
  std::map<int64_t, std::string> folders;
  std::error_code error;
  if (!fs::exists(root, error)) return folders;
  for (fs::directory_iterator it(root, error), end; !error && it != end; it.increment(error)) {
    if (!it->is_directory()) continue;
    if (std::optional<int64_t> step = StepOfFolder(it->path().filename().string())) {
      folders[*step] = it->path().string();
    }
  }
  if (error) return absl::InternalError(absl::StrCat("cannot list ", root, ": ", error.message()));
  return folders;
}

bool IsCommitted(const std::string& step_dir) {
  std::error_code error;
  return fs::exists(fs::path(step_dir) / kManifestFile, error);
}

std::string ManifestCrc(proto::CheckpointManifest manifest) {
  manifest.clear_manifest_crc32c();
  std::string bytes;
  google::protobuf::io::StringOutputStream stream(&bytes);
  {
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    manifest.SerializeToCodedStream(&coded);
  }
  return Crc32cHex(Crc32c(bytes));
}

absl::StatusOr<proto::CheckpointManifest> ReadManifest(const std::string& path) {
  MAGI_ASSIGN_OR_RETURN(std::string json, ReadFile(path));
  proto::CheckpointManifest manifest;
  auto parsed = google::protobuf::util::JsonStringToMessage(json, &manifest);
  if (!parsed.ok()) {
    return absl::DataLossError(absl::StrCat(path, " is corrupt (", parsed.ToString(),
                                            "); move its folder away to resume from the step before"));
  }
  if (manifest.format() != kCheckpointFormat) {
    return absl::DataLossError(
        absl::StrCat(path, " has format '", manifest.format(), "', not '", kCheckpointFormat, "'"));
  }
  std::string crc = ManifestCrc(manifest);
  if (crc != manifest.manifest_crc32c()) {
    return absl::DataLossError(absl::StrCat(path, " is corrupt: its checksum is ", crc, ", it says ",
                                            manifest.manifest_crc32c(),
                                            "; move its folder away to resume from the step before"));
  }
  if (manifest.world_size() <= 0 || manifest.ranks_size() != manifest.world_size()) {
    return absl::DataLossError(absl::StrCat(path, " lists ", manifest.ranks_size(), " rank files for a world of ",
                                            manifest.world_size()));
  }
  return manifest;
}

// Checks the file against the manifest's size and CRC, reading it in chunks.
absl::Status VerifyRankFile(const std::string& dir, const proto::CheckpointRankFile& expected) {
  std::string path = (fs::path(dir) / expected.file()).string();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::DataLossError(absl::StrCat("cannot open ", path, " (rank ", expected.rank(),
                                            "'s file of a committed step): ", std::strerror(errno)));
  }
  uint32_t crc = 0;
  int64_t bytes = 0;
  std::string buffer(1 << 20, '\0');
  while (true) {
    ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      int error = errno;
      ::close(fd);
      return absl::DataLossError(absl::StrCat("cannot read ", path, ": ", std::strerror(error)));
    }
    crc = Crc32cExtend(crc, absl::string_view(buffer.data(), static_cast<size_t>(n)));
    bytes += n;
  }
  ::close(fd);
  if (bytes != expected.bytes() || Crc32cHex(crc) != expected.crc32c()) {
    return absl::DataLossError(absl::StrFormat(
        "%s does not match the manifest: %d bytes with CRC-32C %s, the manifest says %d bytes with %s (a file of "
        "another step or run was put there, or it is corrupt)",
        path, bytes, Crc32cHex(crc), expected.bytes(), expected.crc32c()));
  }
  return absl::OkStatus();
}

// Removes one file or empty folder, as a crash point.
absl::Status RemoveEntry(const fs::path& path) {
  CrashPoint(absl::StrCat("remove ", path.string()));
  std::error_code error;
  fs::remove(path, error);
  if (error) return absl::InternalError(absl::StrCat("cannot remove ", path.string(), ": ", error.message()));
  return absl::OkStatus();
}

// Removes a step folder: its manifest first (the step is then uncommitted), then the rest.
absl::Status RemoveStepFolder(const std::string& dir) {
  fs::path manifest = fs::path(dir) / kManifestFile;
  std::error_code error;
  if (fs::exists(manifest, error)) {
    MAGI_RETURN_IF_ERROR(RemoveEntry(manifest));
    MAGI_RETURN_IF_ERROR(SyncDirectory(dir));
  }
  std::vector<fs::path> entries;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    entries.push_back(it->path());
  }
  if (error) return absl::InternalError(absl::StrCat("cannot list ", dir, ": ", error.message()));
  std::sort(entries.begin(), entries.end());
  for (const fs::path& entry : entries) {
    if (fs::is_directory(entry, error)) {
      return absl::FailedPreconditionError(
          absl::StrCat(entry.string(), " is a folder inside a checkpoint step: not removing ", dir));
    }
    MAGI_RETURN_IF_ERROR(RemoveEntry(entry));
  }
  return RemoveEntry(dir);
}

std::string DtypeName(const at::Tensor& tensor) { return std::string(c10::toString(tensor.scalar_type())); }

}  // namespace

std::string StepFolderName(int64_t step) { return absl::StrFormat("step-%08d", step); }

std::string ModelHash(const RankState& state, const std::string& config) {
  std::string text = absl::StrCat("config=", config, "\n");
  std::map<std::string, std::string> lines;
  for (const auto& [name, tensor] : state.sharded) {
    auto shape = state.full_shapes.find(name);
    lines[name] = absl::StrCat(name, " ", DtypeName(tensor), " ",
                               ShapeString(shape == state.full_shapes.end() ? std::vector<int64_t>{} : shape->second),
                               " ", kShardDim0, "\n");
  }
  for (const auto& [name, tensor] : state.per_rank) {
    lines[name] = absl::StrCat(name, " ", DtypeName(tensor), " ", ShapeString(tensor.sizes().vec()), " ", kPerRank, "\n");
  }
  for (const auto& [name, line] : lines) text += line;
  return Crc32cHex(Crc32c(text));
}

absl::StatusOr<WrittenFile> WriteRankFile(const std::string& path, const RankState& state) {
  for (const auto& [name, tensor] : state.per_rank) {
    if (state.sharded.count(name) || name == kStepKey) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint tensor name '", name, "' is used twice"));
    }
  }
  MAGI_ASSIGN_OR_RETURN(AtomicFileWriter writer, AtomicFileWriter::Open(path));
  WrittenFile written;
  std::string pending;
  absl::Status write_status;
  auto flush = [&]() {
    if (pending.empty() || !write_status.ok()) return;
    write_status = writer.Append(pending);
    written.crc32c = Crc32cExtend(written.crc32c, pending);
    written.bytes += static_cast<int64_t>(pending.size());
    pending.clear();
  };
  // LibTorch's writer throws c10::Error, and iostream errors too (a full disk); a failed
  // write of ours (write_status) is what made it stop, and says more.
  MAGI_RETURN_IF_ERROR(compat::CallTorchWith(
      [&] {
        torch::serialize::OutputArchive archive;
        for (const auto& [name, tensor] : state.sharded) archive.write(name, tensor.detach().cpu());
        for (const auto& [name, tensor] : state.per_rank) archive.write(name, tensor.detach().cpu());
        archive.write(kStepKey, at::scalar_tensor(state.step, at::kLong));
        archive.save_to([&](const void* data, size_t size) -> size_t {
          pending.append(static_cast<const char*>(data), size);
          if (pending.size() >= kWriteChunk) flush();
          return write_status.ok() ? size : 0;  // 0 makes LibTorch stop with an error
        });
      },
      [&](const compat::CaughtException& caught) -> absl::Status {
        if (!write_status.ok()) return write_status;
        return absl::InternalError(absl::StrCat("cannot write checkpoint ", path, ": ", caught.message));
      }));
  flush();
  MAGI_RETURN_IF_ERROR(write_status);
  MAGI_RETURN_IF_ERROR(writer.Commit());
  return written;
}

proto::CheckpointManifest MakeManifest(const RankState& state, const std::string& config,
                                       const std::vector<WrittenFile>& files) {
  const int64_t world = static_cast<int64_t>(files.size());
  proto::CheckpointManifest manifest;
  manifest.set_format(kCheckpointFormat);
  manifest.set_step(state.step);
  manifest.set_world_size(world);
  manifest.set_config(config);
  manifest.set_model_hash(ModelHash(state, config));
  std::map<std::string, proto::CheckpointTensor> tensors;
  for (const auto& [name, tensor] : state.sharded) {
    proto::CheckpointTensor& entry = tensors[name];
    entry.set_name(name);
    entry.set_dtype(DtypeName(tensor));
    const std::vector<int64_t>& shape = state.full_shapes.at(name);
    for (int64_t d : shape) entry.add_full_shape(d);
    entry.set_layout(kShardDim0);
    entry.set_rows_per_rank(ShardRows(shape.empty() ? 0 : shape[0], world));
  }
  for (const auto& [name, tensor] : state.per_rank) {
    proto::CheckpointTensor& entry = tensors[name];
    entry.set_name(name);
    entry.set_dtype(DtypeName(tensor));
    for (int64_t d : tensor.sizes()) entry.add_full_shape(d);
    entry.set_layout(kPerRank);
  }
  for (auto& [name, entry] : tensors) *manifest.add_tensors() = std::move(entry);
  for (int64_t rank = 0; rank < world; ++rank) {
    proto::CheckpointRankFile* file = manifest.add_ranks();
    file->set_rank(rank);
    file->set_file(RankFileName(rank));
    file->set_bytes(files[rank].bytes);
    file->set_crc32c(Crc32cHex(files[rank].crc32c));
  }
  return manifest;
}

absl::Status WriteManifest(const std::string& step_dir, proto::CheckpointManifest manifest) {
  manifest.set_manifest_crc32c(ManifestCrc(manifest));
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  auto printed = google::protobuf::util::MessageToJsonString(manifest, &json, options);
  if (!printed.ok()) return absl::InternalError(absl::StrCat("cannot encode the manifest: ", printed.ToString()));
  return WriteFileAtomically((fs::path(step_dir) / kManifestFile).string(), json);
}

absl::StatusOr<std::optional<CommittedStep>> FindNewestCommittedStep(const std::string& root) {
  MAGI_ASSIGN_OR_RETURN(auto folders, StepFolders(root));
  for (auto it = folders.rbegin(); it != folders.rend(); ++it) {
    if (!IsCommitted(it->second)) continue;
    CommittedStep step;
    step.dir = it->second;
    MAGI_ASSIGN_OR_RETURN(step.manifest, ReadManifest((fs::path(it->second) / kManifestFile).string()));
    if (step.manifest.step() != it->first) {
      return absl::DataLossError(absl::StrCat(step.dir, "/", kManifestFile, " says step ", step.manifest.step()));
    }
    return std::optional<CommittedStep>(std::move(step));
  }
  return std::optional<CommittedStep>();
}

absl::StatusOr<RankState> ReadRankState(const CommittedStep& step, const RankState& like,
                                        const std::optional<std::string>& config,
                                        int64_t world, int64_t rank, bool allow_unused) {
  const proto::CheckpointManifest& manifest = step.manifest;
  const std::string where = step.dir;
  if (config && manifest.config() != *config) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", where, " was written by the run configuration '",
                                                      manifest.config(), "'; this run is '", *config, "'"));
  }
  // Every tensor this run wants must be there with its layout, dtype and full shape.
  std::map<std::string, const proto::CheckpointTensor*> entries;
  for (const proto::CheckpointTensor& entry : manifest.tensors()) entries[entry.name()] = &entry;
  auto check = [&](const std::string& name, const at::Tensor& tensor, const std::vector<int64_t>& full_shape,
                   const char* layout) -> absl::Status {
    auto it = entries.find(name);
    if (it == entries.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", where, " has no tensor '", name, "', which this run has (another model?)"));
    }
    const proto::CheckpointTensor& entry = *it->second;
    std::vector<int64_t> saved(entry.full_shape().begin(), entry.full_shape().end());
    if (entry.layout() != layout || entry.dtype() != DtypeName(tensor) || saved != full_shape) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint ", where, ": '", name, "' is ", entry.dtype(),
                                                     ShapeString(saved), " (", entry.layout(), "), this run has ",
                                                     DtypeName(tensor), ShapeString(full_shape), " (", layout,
                                                     "): another model?"));
    }
    return absl::OkStatus();
  };
  for (const auto& [name, tensor] : like.sharded) {
    auto shape = like.full_shapes.find(name);
    if (shape == like.full_shapes.end()) return absl::InternalError(absl::StrCat("no full shape for ", name));
    MAGI_RETURN_IF_ERROR(check(name, tensor, shape->second, kShardDim0));
  }
  for (const auto& [name, tensor] : like.per_rank) {
    MAGI_RETURN_IF_ERROR(check(name, tensor, tensor.sizes().vec(), kPerRank));
  }
  if (!allow_unused) {
    for (const auto& [name, entry] : entries) {
      if (!like.sharded.count(name) && !like.per_rank.count(name)) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint ", where, " has tensor '", name, "', which this run does not (another model?)"));
      }
    }
  }

  const int64_t saved_world = manifest.world_size();
  const int64_t per_rank_source = rank < saved_world ? rank : 0;
  RankState state;
  state.step = manifest.step();
  state.full_shapes = like.full_shapes;
  // Rows [first, last) of the full tensor that this rank holds in a world of `w` ranks.
  auto rows_of = [](int64_t rows, int64_t w, int64_t r) {
    int64_t per = ShardRows(rows, w);
    return std::make_pair(std::min(rows, r * per), std::min(rows, (r + 1) * per));
  };
  // Saved ranks whose file this rank needs.
  std::set<int64_t> needed;
  if (!like.per_rank.empty()) needed.insert(per_rank_source);
  for (const auto& [name, tensor] : like.sharded) {
    const std::vector<int64_t>& shape = like.full_shapes.at(name);
    const int64_t rows = shape.empty() ? 0 : shape[0];
    auto [first, last] = rows_of(rows, world, rank);
    for (int64_t k = 0; k < saved_world; ++k) {
      auto [saved_first, saved_last] = rows_of(rows, saved_world, k);
      if (saved_world == world ? k == rank : std::max(first, saved_first) < std::min(last, saved_last)) {
        needed.insert(k);
      }
    }
  }
  // Sharded tensors are assembled into zero-padded shards of this world's size.
  for (const auto& [name, tensor] : like.sharded) {
    if (saved_world == world) continue;  // taken whole from this rank's own file
    const std::vector<int64_t>& shape = like.full_shapes.at(name);
    std::vector<int64_t> local = shape;
    if (!local.empty()) local[0] = ShardRows(shape[0], world);
    state.sharded[name] = at::zeros(local, tensor.options().device(at::kCPU));
  }
  for (int64_t k : needed) {
    const proto::CheckpointRankFile& file = manifest.ranks(static_cast<int>(k));
    if (file.rank() != k) return absl::DataLossError(absl::StrCat(where, "/", kManifestFile, ": ranks out of order"));
    MAGI_RETURN_IF_ERROR(VerifyRankFile(step.dir, file));
    const std::string path = (fs::path(step.dir) / file.file()).string();
    torch::serialize::InputArchive archive;
    MAGI_RETURN_IF_ERROR(compat::CallTorch(absl::StatusCode::kDataLoss, absl::StrCat("cannot read checkpoint ", path),
                                           [&] { archive.load_from(path); }));
    auto read = [&](const std::string& name, at::Tensor& out) -> absl::Status {
      if (!archive.try_read(name, out)) {
        return absl::DataLossError(absl::StrCat(path, " has no tensor '", name, "', which its manifest lists"));
      }
      return absl::OkStatus();
    };
    if (k == per_rank_source) {
      for (const auto& [name, tensor] : like.per_rank) {
        at::Tensor saved;
        MAGI_RETURN_IF_ERROR(read(name, saved));
        if (saved.sizes() != tensor.sizes() || saved.scalar_type() != tensor.scalar_type()) {
          return absl::DataLossError(absl::StrCat(path, ": '", name, "' does not match its manifest"));
        }
        state.per_rank[name] = saved.to(tensor.device());
      }
    }
    for (const auto& [name, tensor] : like.sharded) {
      const std::vector<int64_t>& shape = like.full_shapes.at(name);
      const int64_t rows = shape.empty() ? 0 : shape[0];
      std::vector<int64_t> saved_local = shape;
      if (!saved_local.empty()) saved_local[0] = ShardRows(rows, saved_world);
      if (saved_world == world && k != rank) continue;
      at::Tensor saved;
      MAGI_RETURN_IF_ERROR(read(name, saved));
      if (saved.sizes().vec() != saved_local || saved.scalar_type() != tensor.scalar_type()) {
        return absl::DataLossError(absl::StrCat(path, ": '", name, "' is ", DtypeName(saved),
                                                ShapeString(saved.sizes().vec()), ", its manifest says ",
                                                DtypeName(tensor), ShapeString(saved_local)));
      }
      if (saved_world == world) {
        state.sharded[name] = saved;
        continue;
      }
      auto [first, last] = rows_of(rows, world, rank);
      auto [saved_first, saved_last] = rows_of(rows, saved_world, k);
      int64_t from = std::max(first, saved_first), to = std::min(last, saved_last);
      if (from >= to) continue;
      state.sharded[name].narrow(0, from - first, to - from).copy_(saved.narrow(0, from - saved_first, to - from));
    }
  }
  for (auto& [name, tensor] : state.sharded) tensor = tensor.to(like.sharded.at(name).device());
  return state;
}

absl::StatusOr<std::vector<std::string>> CleanCheckpointRoot(const std::string& root, int keep_last) {
  std::vector<std::string> removed;
  std::error_code error;
  if (!fs::exists(root, error)) return removed;
  MAGI_ASSIGN_OR_RETURN(auto folders, StepFolders(root));
  std::vector<int64_t> committed;
  for (const auto& [step, dir] : folders) {
    if (IsCommitted(dir)) committed.push_back(step);
  }
  std::set<int64_t> keep(committed.end() - std::min<size_t>(committed.size(), keep_last > 0 ? keep_last : committed.size()),
                         committed.end());
  for (const auto& [step, dir] : folders) {
    if (keep.count(step)) continue;
    MAGI_RETURN_IF_ERROR(RemoveStepFolder(dir));  // an old committed step, or one never committed
    removed.push_back(StepFolderName(step) + "/");
  }
  const bool removed_folders = !removed.empty();
  // Temporaries of writers that died: in the root and in the steps kept.
  std::vector<std::pair<std::string, std::string>> places = {{root, ""}};  // folder, its name in `removed`
  for (int64_t step : keep) places.emplace_back(folders.at(step), StepFolderName(step) + "/");
  for (const auto& [place, prefix] : places) {
    std::vector<fs::path> stale;
    for (fs::directory_iterator it(place, error), end; !error && it != end; it.increment(error)) {
      if (it->is_regular_file() && it->path().filename().string().find(".tmp.") != std::string::npos) {
        stale.push_back(it->path());
      }
    }
    if (error) return absl::InternalError(absl::StrCat("cannot list ", place, ": ", error.message()));
    std::sort(stale.begin(), stale.end());
    for (const fs::path& path : stale) {
      MAGI_RETURN_IF_ERROR(RemoveEntry(path));
      removed.push_back(prefix + path.filename().string());
    }
    if (!stale.empty() && place != root) MAGI_RETURN_IF_ERROR(SyncDirectory(place));
  }
  if (removed_folders) MAGI_RETURN_IF_ERROR(SyncDirectory(root));
  return removed;
}

}  // namespace magi
