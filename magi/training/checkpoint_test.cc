// Committed-step checkpoints (issue 14, item 1; issue 16, resharding): the protocol across
// real processes (Gloo), crash consistency by killing a rank (SIGKILL) at every crash
// point of a save in turn, resharding on load, and the refusals (ranks that disagree, a
// file of another step, a corrupt manifest, another model or config).
//
// The test binary is its own worker: the cases launch it with the local launcher and
// MAGI_CKPT_WORKER naming a scenario; the worker's state at step s is a deterministic
// function of s, so any process can tell what a loaded step must hold.
#include <ATen/ATen.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "magi/base/crash_points.h"
#include "magi/base/crc32c.h"
#include "magi/base/file.h"
#include "magi/base/gtest_printers.h"
#include "magi/runtime/distributed/launcher.h"
#include "magi/runtime/distributed/rendezvous.h"
#include "magi/runtime/gloo/gloo_communicator.h"
#include "magi/training/checkpoint.h"

namespace magi {
namespace {

namespace fs = std::filesystem;

std::string g_self;  // path of this binary
constexpr char kConfig[] = "checkpoint test v1";

// The full tensors at `step`: uneven first dims (7 and 250 rows split over 2, 3 and 4
// ranks) and one of 1.6 MB, which takes two write calls.
std::vector<std::pair<std::string, at::Tensor>> FullTensors(int64_t step) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
      {"a.weight", {7, 3}}, {"b.weight", {250, 1600}}, {"c.bias", {5}}};
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto& [name, shape] = shapes[i];
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    at::Tensor base = at::arange(numel, at::kFloat).reshape(shape) * 1e-3 + static_cast<double>(step + static_cast<int64_t>(i));
    out.emplace_back(name + ".shard", base);
    out.emplace_back(name + ".exp_avg", base * -2);
  }
  return out;
}

// What rank `rank` of `world` saves at `step`.
RankState StateFor(int64_t step, int64_t world, int64_t rank) {
  RankState state;
  state.step = step;
  for (const auto& [name, full] : FullTensors(step)) {
    state.sharded[name] = ShardOf(full, world, static_cast<int>(rank));
    state.full_shapes[name] = full.sizes().vec();
  }
  state.per_rank["buffer.stat"] = at::full({4}, 100.0 * rank + step);
  state.per_rank["magi.rng.cpu"] = (at::arange(16, at::kByte) + static_cast<int>(rank + step)).to(at::kByte);
  return state;
}

// What rank `rank` of `world` in replica `replica` of an HSDP mesh saves at `step`: the
// same shards as replica 0, its own per-rank tensors (buffers differ between replicas),
// so a file written by another replica than 0 is told apart by its bytes.
RankState ReplicaStateFor(int64_t step, int64_t world, int64_t rank, int64_t replica) {
  RankState state = StateFor(step, world, rank);
  state.per_rank["buffer.stat"] += 1000.0 * replica;
  return state;
}

// "" when `got` holds what rank `rank` of `world` must load from `step`, saved by
// `saved_world` ranks (replica 0's per-rank tensors); else what differs.
std::string Mismatch(const RankState& got, int64_t step, int64_t world, int64_t rank, int64_t saved_world) {
  RankState want = StateFor(step, world, rank);
  RankState source = StateFor(step, saved_world, rank < saved_world ? rank : 0);
  if (got.step != step) return absl::StrCat("step ", got.step, ", want ", step);
  for (const auto& [name, tensor] : want.sharded) {
    auto it = got.sharded.find(name);
    if (it == got.sharded.end() || !at::equal(it->second, tensor)) return absl::StrCat(name, " differs");
  }
  for (const auto& [name, tensor] : source.per_rank) {
    auto it = got.per_rank.find(name);
    if (it == got.per_rank.end() || !at::equal(it->second, tensor)) return absl::StrCat(name, " differs");
  }
  if (got.sharded.size() != want.sharded.size() || got.per_rank.size() != source.per_rank.size()) {
    return "unexpected tensors";
  }
  return "";
}

int Fail(const std::string& message) {
  std::cerr << "worker failed: " << message << std::endl;
  if (const char* dir = std::getenv("MAGI_TEST_OUT")) {
    std::ofstream(std::string(dir) + "/rank" + std::getenv("RANK") + ".txt") << message;
  }
  return 1;
}

std::string Env(const char* name, const std::string& fallback = "") {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

int64_t EnvInt(const char* name, int64_t fallback) {
  int64_t value = fallback;
  return absl::SimpleAtoi(Env(name), &value) ? value : fallback;
}

// Scenarios: "save" commits MAGI_CKPT_STEPS ("1,2") under MAGI_CKPT_ROOT keeping
// MAGI_CKPT_KEEP; "load" loads the newest step (root MAGI_CKPT_ROOT_<rank> if set), checks
// it is MAGI_CKPT_EXPECT (-1: none) saved by MAGI_CKPT_SAVED_WORLD ranks, and with
// MAGI_CKPT_SAVE_NEXT commits the step after it (keeping 1); MAGI_CKPT_READ_ONLY=1 loads
// as inference does. With MAGI_CKPT_MESH=RxS the processes form an HSDP mesh as
// DeviceMesh {R, S} numbers it (rank = replica * S + shard rank), one Gloo communicator
// per axis: the checkpoint's world is S, and replica r saves ReplicaStateFor(.., r).
int RunWorker(const std::string& scenario) {
  absl::StatusOr<DistributedEnv> env = DistributedEnvFromEnvironment();
  if (!env.ok()) return Fail(std::string(env.status().message()));
  auto store = ConnectStore(*env, std::chrono::seconds(60));
  if (!store.ok()) return Fail(std::string(store.status().message()));
  int64_t replicas = 1, shards = env->world_size;
  if (std::string mesh_text = Env("MAGI_CKPT_MESH"); !mesh_text.empty()) {
    std::vector<std::string> parts = absl::StrSplit(mesh_text, 'x');
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &replicas) || !absl::SimpleAtoi(parts[1], &shards) ||
        replicas * shards != env->world_size) {
      return Fail("bad MAGI_CKPT_MESH " + mesh_text);
    }
  }
  const int64_t replica = env->rank / shards;
  auto communicator = CreateGlooCommunicator(*store, static_cast<int>(env->rank % shards), static_cast<int>(shards),
                                             absl::StrCat("shard.", replica), std::chrono::seconds(30));
  if (!communicator.ok()) return Fail(std::string(communicator.status().message()));
  std::shared_ptr<Communicator> replicate;
  if (replicas > 1) {
    auto created = CreateGlooCommunicator(*store, static_cast<int>(replica), static_cast<int>(replicas),
                                          absl::StrCat("replicate.", env->rank % shards), std::chrono::seconds(30));
    if (!created.ok()) return Fail(std::string(created.status().message()));
    replicate = *created;
  }
  const CheckpointMesh mesh(**communicator, replicate.get());
  const int64_t world = shards, rank = env->rank % shards;
  const at::Device cpu(at::kCPU);
  std::string root = Env(absl::StrCat("MAGI_CKPT_ROOT_", rank).c_str(), Env("MAGI_CKPT_ROOT"));
  if (scenario == "save") {
    CheckpointOptions options;
    options.keep_last = static_cast<int>(EnvInt("MAGI_CKPT_KEEP", 0));
    options.config = kConfig;
    std::vector<std::string> counts;
    for (absl::string_view text : absl::StrSplit(Env("MAGI_CKPT_STEPS"), ',', absl::SkipEmpty())) {
      int64_t step = 0;
      if (!absl::SimpleAtoi(text, &step)) return Fail("bad MAGI_CKPT_STEPS");
      absl::Status saved = SaveCommittedCheckpoint(root, ReplicaStateFor(step, world, rank, replica), mesh, cpu, options);
      if (!saved.ok()) return Fail(saved.ToString());
      counts.push_back(absl::StrCat(CrashPointsReached()));
    }
    if (!Env("MAGI_TEST_OUT").empty()) {  // crash points reached after each step, for the sweep
      absl::Status written = WriteFileAtomically(absl::StrCat(Env("MAGI_TEST_OUT"), "/points", env->rank, ".txt"),
                                                 absl::StrJoin(counts, ","));
      if (!written.ok()) return Fail(written.ToString());
    }
    return 0;
  }
  if (scenario == "load") {
    const int64_t expect = EnvInt("MAGI_CKPT_EXPECT", -1);
    const CheckpointUse use = Env("MAGI_CKPT_READ_ONLY") == "1" ? CheckpointUse::kReadOnly : CheckpointUse::kResume;
    absl::StatusOr<RankState> loaded =
        LoadCommittedCheckpoint(root, StateFor(0, world, rank), std::string(kConfig), mesh, cpu, use);
    int64_t next = 1;
    if (expect < 0) {
      if (loaded.status().code() != absl::StatusCode::kNotFound) {
        return Fail(absl::StrCat("expected no committed step, got ", loaded.status().ToString()));
      }
    } else {
      if (!loaded.ok()) return Fail(loaded.status().ToString());
      std::string mismatch = Mismatch(*loaded, expect, world, rank, EnvInt("MAGI_CKPT_SAVED_WORLD", world));
      if (!mismatch.empty()) return Fail("loaded state: " + mismatch);
      next = expect + 1;
    }
    if (Env("MAGI_CKPT_SAVE_NEXT") == "1") {
      CheckpointOptions options;
      options.keep_last = 1;
      options.config = kConfig;
      absl::Status saved = SaveCommittedCheckpoint(root, ReplicaStateFor(next, world, rank, replica), mesh, cpu, options);
      if (!saved.ok()) return Fail(saved.ToString());
    }
    return 0;
  }
  return Fail("unknown scenario " + scenario);
}

std::string TempDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

// A fresh folder for one case.
std::string FreshDir(const std::string& name) {
  std::string dir = TempDir() + "/" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

LaunchResult Launch(int world, const std::string& scenario, std::map<std::string, std::string> env) {
  env["MAGI_CKPT_WORKER"] = scenario;
  absl::StatusOr<LaunchResult> result = LaunchLocalWorkers(world, {g_self}, env, std::chrono::seconds(2));
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *result : LaunchResult{-1, -1};
}

std::string ReadRankMessage(const std::string& out, int rank) {
  absl::StatusOr<std::string> text = ReadFile(absl::StrCat(out, "/rank", rank, ".txt"));
  return text.ok() ? *text : "";
}

// Every file and folder under `root`, relative, sorted.
std::vector<std::string> Listing(const std::string& root) {
  std::vector<std::string> out;
  if (!fs::exists(root)) return out;
  for (const auto& entry : fs::recursive_directory_iterator(root)) out.push_back(fs::relative(entry.path(), root).string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(CheckpointTest, CommitsOneStepAcrossRanksAndKeepsTheNewest) {
  std::string root = FreshDir("commit") + "/ckpt";
  LaunchResult saved = Launch(2, "save", {{"MAGI_CKPT_ROOT", root}, {"MAGI_CKPT_STEPS", "1,2,3"}, {"MAGI_CKPT_KEEP", "2"}});
  ASSERT_EQ(saved.exit_code, 0);
  EXPECT_EQ(Listing(root), (std::vector<std::string>{
                               "step-00000002", "step-00000002/manifest.json", "step-00000002/rank0.pt",
                               "step-00000002/rank1.pt", "step-00000003", "step-00000003/manifest.json",
                               "step-00000003/rank0.pt", "step-00000003/rank1.pt"}));
  absl::StatusOr<std::optional<CommittedStep>> newest = FindNewestCommittedStep(root);
  ASSERT_TRUE(newest.ok() && newest->has_value()) << newest.status();
  const proto::CheckpointManifest& manifest = (*newest)->manifest;
  EXPECT_EQ(manifest.step(), 3);
  EXPECT_EQ(manifest.world_size(), 2);
  EXPECT_EQ(manifest.config(), kConfig);
  EXPECT_EQ(manifest.model_hash(), ModelHash(StateFor(3, 2, 0), kConfig));
  EXPECT_EQ(manifest.model_hash(), ModelHash(StateFor(3, 4, 1), kConfig));  // the same at any world size
  ASSERT_EQ(manifest.ranks_size(), 2);
  for (const proto::CheckpointRankFile& file : manifest.ranks()) {
    std::string bytes = *ReadFile(root + "/step-00000003/" + file.file());
    EXPECT_EQ(file.bytes(), static_cast<int64_t>(bytes.size()));
    EXPECT_EQ(file.crc32c(), Crc32cHex(Crc32c(bytes)));
  }
  bool found_b = false;
  for (const proto::CheckpointTensor& tensor : manifest.tensors()) {
    if (tensor.name() != "b.weight.shard") continue;
    found_b = true;
    EXPECT_EQ(tensor.layout(), "shard_dim0");
    EXPECT_EQ(tensor.rows_per_rank(), 125);
    EXPECT_EQ(std::vector<int64_t>(tensor.full_shape().begin(), tensor.full_shape().end()),
              (std::vector<int64_t>{250, 1600}));
  }
  EXPECT_TRUE(found_b);
  EXPECT_EQ(Launch(2, "load", {{"MAGI_CKPT_ROOT", root}, {"MAGI_CKPT_EXPECT", "3"}}).exit_code, 0);
}

// Issue 16: saved by 2 ranks, resumed by 1, 3 and 4 (uneven rows), and by 2 from 3.
TEST(CheckpointTest, ResumesAtAnotherWorldSize) {
  std::string root = FreshDir("reshard") + "/ckpt";
  ASSERT_EQ(Launch(2, "save", {{"MAGI_CKPT_ROOT", root}, {"MAGI_CKPT_STEPS", "4"}}).exit_code, 0);
  for (int world : {1, 3, 4}) {
    EXPECT_EQ(Launch(world, "load", {{"MAGI_CKPT_ROOT", root}, {"MAGI_CKPT_EXPECT", "4"}, {"MAGI_CKPT_SAVED_WORLD", "2"}})
                  .exit_code,
              0)
        << world << " ranks";
  }
  std::string root3 = FreshDir("reshard3") + "/ckpt";
  ASSERT_EQ(Launch(3, "save", {{"MAGI_CKPT_ROOT", root3}, {"MAGI_CKPT_STEPS", "5"}}).exit_code, 0);
  EXPECT_EQ(Launch(2, "load", {{"MAGI_CKPT_ROOT", root3}, {"MAGI_CKPT_EXPECT", "5"}, {"MAGI_CKPT_SAVED_WORLD", "3"}})
                .exit_code,
            0);
}

// Processes of a test mesh ("": a 1-D world of 2, "RxS": HSDP), and the checkpoint's world (S).
int MeshProcesses(const std::string& mesh) { return mesh.empty() ? 2 : (mesh[0] - '0') * (mesh[2] - '0'); }
int MeshShards(const std::string& mesh) { return mesh.empty() ? 2 : mesh[2] - '0'; }

// The environment of a launch on `mesh`.
std::map<std::string, std::string> OnMesh(const std::string& mesh, std::map<std::string, std::string> env) {
  if (!mesh.empty()) env["MAGI_CKPT_MESH"] = mesh;
  return env;
}

// Each rank's crash points after the first and after the second of the two saves the
// kill sweeps run on `mesh`, counted by a run without a kill (the same on every run: each
// rank passes the same points whichever rank creates a folder first).
const std::vector<std::vector<int>>& CrashPointCounts(const std::string& mesh = "") {
  static auto* by_mesh = new std::map<std::string, std::vector<std::vector<int>>>();
  auto found = by_mesh->find(mesh);
  if (found != by_mesh->end()) return found->second;
  std::vector<std::vector<int>>& out = (*by_mesh)[mesh];
  out.resize(MeshProcesses(mesh));
  std::string dry = FreshDir("kill_dry");
  LaunchResult run = Launch(MeshProcesses(mesh), "save",
                            OnMesh(mesh, {{"MAGI_CKPT_ROOT", dry + "/ckpt"}, {"MAGI_CKPT_STEPS", "1,2"},
                                          {"MAGI_CKPT_KEEP", "1"}, {"MAGI_CRASH_AT", "1000000"},
                                          {"MAGI_TEST_OUT", dry}}));
  EXPECT_EQ(run.exit_code, 0);
  for (int rank = 0; rank < MeshProcesses(mesh); ++rank) {
    absl::StatusOr<std::string> text = ReadFile(absl::StrCat(dry, "/points", rank, ".txt"));
    for (absl::string_view count : absl::StrSplit(text.ok() ? *text : "0,0", ',')) {
      int n = 0;
      EXPECT_TRUE(absl::SimpleAtoi(count, &n));
      out[rank].push_back(n);
    }
    std::cout << "mesh '" << mesh << "': crash points per save: rank " << rank << " " << out[rank][0] << " + "
              << out[rank][1] - out[rank][0] << "\n";
  }
  return out;
}

// Issue 14, item 1: a kill at any moment of a save leaves the last committed step intact.
// Two saves (steps 1 and 2; the second also prunes the first: keep 1) run on 2 ranks (or
// an HSDP `mesh`), and a rank is killed with SIGKILL at its Nth crash point (every create,
// write, fsync, rename and remove, each in turn: not timing luck), for N = first..last
// (every `stride`-th); N = last + 1 must run to the end. After each kill the newest
// committed step is none, 1 or 2, never older than after an earlier kill, and every shard
// rank reads exactly its values (checksums verified; replica 0's per-rank tensors); for
// each distinct state left on disk a real resume (every process of the mesh) agrees on
// it, cleans the leftovers and commits the next step.
void KillSweep(const std::string& killed, int first, int last, bool then_to_the_end,
               const std::set<int64_t>& expected_steps, const std::string& mesh = "", int stride = 1) {
  static std::set<std::string>* resumed_states = new std::set<std::string>();
  const int processes = MeshProcesses(mesh), shards = MeshShards(mesh);
  int64_t last_step = 0;
  std::set<int64_t> steps_seen;
  int kills = 0, resumes = 0;
  std::vector<int> points;
  for (int n = first; n <= last; n += stride) points.push_back(n);
  if (then_to_the_end) points.push_back(last + 1);
  for (int n : points) {
    SCOPED_TRACE(absl::StrCat("mesh '", mesh, "': rank ", killed, " killed at crash point ", n));
    std::string dir = FreshDir("kill_" + killed);
    std::string root = dir + "/ckpt";
    std::map<std::string, std::string> env = {{"MAGI_CKPT_ROOT", root}, {"MAGI_CKPT_STEPS", "1,2"},
                                              {"MAGI_CKPT_KEEP", "1"}, {"MAGI_CRASH_AT", std::to_string(n)}};
    if (killed != "all") env["MAGI_CRASH_RANK"] = killed;
    LaunchResult saved = Launch(processes, "save", OnMesh(mesh, env));
    const bool finished = saved.exit_code == 0;
    ASSERT_EQ(finished, n == last + 1) << "exit code " << saved.exit_code;
    kills += !finished;

    absl::StatusOr<std::optional<CommittedStep>> newest = FindNewestCommittedStep(root);
    ASSERT_TRUE(newest.ok()) << newest.status();
    int64_t step = newest->has_value() ? (*newest)->manifest.step() : 0;
    EXPECT_GE(step, last_step);
    last_step = step;
    steps_seen.insert(step);
    if (newest->has_value()) {
      for (int rank = 0; rank < shards; ++rank) {
        absl::StatusOr<RankState> state =
            ReadRankState(**newest, StateFor(0, shards, rank), std::string(kConfig), shards, rank);
        ASSERT_TRUE(state.ok()) << state.status();
        EXPECT_EQ(Mismatch(*state, step, shards, rank, shards), "");
      }
    }
    // What the kill left (temporaries without their pid): resume once from each such state.
    std::string state_key = absl::StrCat(mesh, ":", step, ":");
    for (const std::string& path : Listing(root)) {
      size_t temp = path.find(".tmp.");
      absl::StrAppend(&state_key, temp == std::string::npos ? path : path.substr(0, temp + 4), ";");
    }
    if (!resumed_states->insert(state_key).second) continue;
    ++resumes;
    LaunchResult resumed = Launch(processes, "load",
                                  OnMesh(mesh, {{"MAGI_CKPT_ROOT", root},
                                                {"MAGI_CKPT_EXPECT", std::to_string(step > 0 ? step : -1)},
                                                {"MAGI_CKPT_SAVE_NEXT", "1"},
                                                {"MAGI_TEST_OUT", dir}}));
    ASSERT_EQ(resumed.exit_code, 0) << ReadRankMessage(dir, 0) << " / " << ReadRankMessage(dir, 1);
    std::string next = StepFolderName(step + 1);
    std::vector<std::string> want = {next, next + "/manifest.json"};
    for (int rank = 0; rank < shards; ++rank) want.push_back(absl::StrCat(next, "/rank", rank, ".pt"));
    EXPECT_EQ(Listing(root), want);
  }
  EXPECT_EQ(steps_seen, expected_steps);
  std::cout << "mesh '" << mesh << "': rank " << killed << " killed at crash points " << first << ".." << last
            << " (every " << stride << "): " << kills << " kills, each leaving the last committed step loadable; "
            << resumes << " new states resumed\n";
}

// Every rank dies at its Nth point, over both saves (two halves, which test shards run in
// parallel: the first save, and the second).
TEST(CheckpointKillTest, EveryRankKilledAtEachCrashPointOfTheFirstSave) {
  const auto& points = CrashPointCounts();
  ASSERT_EQ(points[0].size(), 2u);
  KillSweep("all", 1, std::max(points[0][0], points[1][0]), false, {0, 1});
}

TEST(CheckpointKillTest, EveryRankKilledAtEachCrashPointOfTheSecondSave) {
  const auto& points = CrashPointCounts();
  ASSERT_EQ(points[0].size(), 2u);
  KillSweep("all", std::max(points[0][0], points[1][0]) + 1, std::max(points[0][1], points[1][1]), true, {1, 2});
}

// Rank 1 alone dies in the second save (its points there all come before the commit).
TEST(CheckpointKillTest, Rank1KilledAtEachCrashPointOfTheSecondSave) {
  const auto& points = CrashPointCounts();
  ASSERT_EQ(points[1].size(), 2u);
  KillSweep("1", points[1][0] + 1, points[1][1], true, {1, 2});
}

// Rank 0 alone dies in the second save, at the points where the "all" sweep killed rank 1
// too (past rank 1's last point, that sweep killed rank 0 alone already).
TEST(CheckpointKillTest, Rank0KilledAtEachCrashPointOfTheSecondSave) {
  const auto& points = CrashPointCounts();
  ASSERT_EQ(points[0].size(), 2u);
  KillSweep("0", points[0][0] + 1, std::min(points[0][1], points[1][1]), false, {1});
}

// Issue 40, item 6: on an HSDP mesh each replica group's rank 0 wrote rank0.pt and the
// manifest into the same step folder, and pruned old steps while the other group wrote
// (a commit failed with "cannot rename onto .../manifest.json"; a file of one replica
// could sit beside the other's manifest). The replicas here save different per-rank
// tensors, so every file tells which replica wrote it: six saves on 2x2 and on 2x4 must
// all commit, and the steps kept hold replica 0's files, matching their manifest.
TEST(CheckpointHsdpTest, OneReplicaWritesEachFileAndTheWholeMeshCommits) {
  for (const std::string mesh : {"2x2", "2x4"}) {
    SCOPED_TRACE("mesh " + mesh);
    const int shards = MeshShards(mesh);
    std::string dir = FreshDir("hsdp");
    std::string root = dir + "/ckpt";
    LaunchResult saved = Launch(MeshProcesses(mesh), "save",
                                OnMesh(mesh, {{"MAGI_CKPT_ROOT", root}, {"MAGI_CKPT_STEPS", "1,2,3,4,5,6"},
                                              {"MAGI_CKPT_KEEP", "2"}, {"MAGI_TEST_OUT", dir}}));
    ASSERT_EQ(saved.exit_code, 0) << "rank " << saved.failed_rank << ": " << ReadRankMessage(dir, saved.failed_rank);
    std::vector<std::string> want;
    for (int64_t step : {5, 6}) {
      want.push_back(StepFolderName(step));
      want.push_back(StepFolderName(step) + "/manifest.json");
      for (int rank = 0; rank < shards; ++rank) want.push_back(absl::StrCat(StepFolderName(step), "/rank", rank, ".pt"));
    }
    EXPECT_EQ(Listing(root), want);
    absl::StatusOr<std::optional<CommittedStep>> newest = FindNewestCommittedStep(root);
    ASSERT_TRUE(newest.ok() && newest->has_value()) << newest.status();
    EXPECT_EQ((*newest)->manifest.world_size(), shards);
    for (int rank = 0; rank < shards; ++rank) {
      absl::StatusOr<RankState> state = ReadRankState(**newest, StateFor(0, shards, rank), std::string(kConfig), shards, rank);
      ASSERT_TRUE(state.ok()) << state.status();
      EXPECT_EQ(Mismatch(*state, 6, shards, rank, shards), "") << "rank " << rank << "'s file is not replica 0's";
    }
    // Every replica resumes from replica 0's files.
    LaunchResult loaded = Launch(MeshProcesses(mesh), "load",
                                 OnMesh(mesh, {{"MAGI_CKPT_ROOT", root}, {"MAGI_CKPT_EXPECT", "6"}, {"MAGI_TEST_OUT", dir}}));
    EXPECT_EQ(loaded.exit_code, 0) << "rank " << loaded.failed_rank << ": " << ReadRankMessage(dir, loaded.failed_rank);
  }
}

// Issue 40, item 6, under kills: a 2x2 mesh killed at every second crash point of its
// second save (the commit and the pruning, where the replica groups raced), and a 2x4
// mesh at every fifth point of both saves; each kill is followed by a resume on the same
// mesh. (Strides keep the launches of 4 and 8 processes within CI's time on 2 cores.)
TEST(CheckpointHsdpTest, TwoByTwoKilledInTheSecondSave) {
  const auto& points = CrashPointCounts("2x2");
  ASSERT_EQ(points[0].size(), 2u);
  KillSweep("all", points[0][0] + 1, points[0][1], true, {1, 2}, "2x2", /*stride=*/2);
}

TEST(CheckpointHsdpTest, TwoByFourKilledInBothSaves) {
  const auto& points = CrashPointCounts("2x4");
  ASSERT_EQ(points[0].size(), 2u);
  KillSweep("all", 1, points[0][1], true, {0, 1, 2}, "2x4", /*stride=*/5);
}

// Issue 40, item 4: a save killed midway leaves its files behind (here rank 0 dies as it
// syncs the manifest's temporary, after every rank renamed its file: an uncommitted step
// folder and a temporary). The next run's first save, a fresh one on 2 ranks of the same
// step, removes them before any rank writes, so the step it commits holds its own files
// only (before, rank2.pt of the killed run stayed inside the committed step).
TEST(CheckpointTest, ASaveRemovesWhatAKilledSaveLeftBeforeWriting) {
  std::string dry = FreshDir("leftovers_dry");
  ASSERT_EQ(Launch(3, "save", {{"MAGI_CKPT_ROOT", dry + "/ckpt"}, {"MAGI_CKPT_STEPS", "2"},
                               {"MAGI_CRASH_AT", "1000000"}, {"MAGI_TEST_OUT", dry}})
                .exit_code,
            0);
  // Rank 1's crash points: those of a rank file, which rank 0 passes too before its
  // manifest's create (+1), write (+2) and fsync (+3).
  int points = 0;
  ASSERT_TRUE(absl::SimpleAtoi(ReadFile(dry + "/points1.txt").value_or(""), &points));
  std::string dir = FreshDir("leftovers");
  std::string root = dir + "/ckpt";
  LaunchResult killed = Launch(3, "save", {{"MAGI_CKPT_ROOT", root}, {"MAGI_CKPT_STEPS", "2"},
                                           {"MAGI_CRASH_RANK", "0"}, {"MAGI_CRASH_AT", std::to_string(points + 3)}});
  ASSERT_EQ(killed.exit_code, 128 + SIGKILL);
  std::vector<std::string> left = Listing(root);
  ASSERT_EQ(left.size(), 5u);
  EXPECT_EQ(left[1].substr(0, 32), "step-00000002/manifest.json.tmp.");
  left.erase(left.begin() + 1);
  EXPECT_EQ(left, (std::vector<std::string>{"step-00000002", "step-00000002/rank0.pt", "step-00000002/rank1.pt",
                                            "step-00000002/rank2.pt"}));
  LaunchResult saved = Launch(2, "save", {{"MAGI_CKPT_ROOT", root}, {"MAGI_CKPT_STEPS", "2"}, {"MAGI_TEST_OUT", dir}});
  ASSERT_EQ(saved.exit_code, 0) << ReadRankMessage(dir, 0);
  EXPECT_EQ(Listing(root), (std::vector<std::string>{"step-00000002", "step-00000002/manifest.json",
                                                     "step-00000002/rank0.pt", "step-00000002/rank1.pt"}));
  EXPECT_EQ(Launch(2, "load", {{"MAGI_CKPT_ROOT", root}, {"MAGI_CKPT_EXPECT", "2"}}).exit_code, 0);
}

// The scenario: rank 0 at step 6 and rank 1 at step 5 (here: folders that are not
// shared, one of which lacks the last step). Both ranks fail at load, naming both steps.
TEST(CheckpointTest, RanksThatFindDifferentStepsFailBeforeTraining) {
  std::string dir = FreshDir("disagree");
  std::string a = dir + "/a", b = dir + "/b";
  ASSERT_EQ(Launch(2, "save", {{"MAGI_CKPT_ROOT", a}, {"MAGI_CKPT_STEPS", "5,6"}}).exit_code, 0);
  fs::copy(a, b, fs::copy_options::recursive);
  fs::remove_all(b + "/step-00000006");
  LaunchResult loaded = Launch(2, "load", {{"MAGI_CKPT_ROOT_0", a},
                                           {"MAGI_CKPT_ROOT_1", b},
                                           {"MAGI_CKPT_EXPECT", "6"},
                                           {"MAGI_TEST_OUT", dir}});
  EXPECT_NE(loaded.exit_code, 0);
  for (int rank = 0; rank < 2; ++rank) {
    std::string message = ReadRankMessage(dir, rank);
    EXPECT_NE(message.find("the ranks disagree on the newest committed checkpoint"), std::string::npos) << message;
    EXPECT_NE(message.find("rank 0 has step 6"), std::string::npos) << message;
    EXPECT_NE(message.find("rank 1 has step 5"), std::string::npos) << message;
  }
}

// A rank file replaced by the same rank's file of another step: refused by its checksum,
// on every rank, before anything trains.
TEST(CheckpointTest, AFileOfAnotherStepIsRefused) {
  std::string dir = FreshDir("swapped");
  std::string root = dir + "/ckpt";
  ASSERT_EQ(Launch(2, "save", {{"MAGI_CKPT_ROOT", root}, {"MAGI_CKPT_STEPS", "5,6"}}).exit_code, 0);
  fs::copy_file(root + "/step-00000005/rank1.pt", root + "/step-00000006/rank1.pt",
                fs::copy_options::overwrite_existing);
  LaunchResult loaded =
      Launch(2, "load", {{"MAGI_CKPT_ROOT", root}, {"MAGI_CKPT_EXPECT", "6"}, {"MAGI_TEST_OUT", dir}});
  EXPECT_NE(loaded.exit_code, 0);
  std::string own = ReadRankMessage(dir, 1);
  EXPECT_NE(own.find("DATA_LOSS: " + root + "/step-00000006/rank1.pt does not match the manifest"), std::string::npos)
      << own;
  std::string peer = ReadRankMessage(dir, 0);
  EXPECT_NE(peer.find("rank 1 could not load its checkpoint from " + root), std::string::npos) << peer;
}

// --- Single-process cases on files written through the same functions. ---

// Writes a committed step as `world` ranks would (no collectives).
void WriteStep(const std::string& root, int64_t step, int64_t world, const std::string& config = kConfig) {
  std::string dir = root + "/" + StepFolderName(step);
  fs::create_directories(dir);
  std::vector<WrittenFile> files;
  for (int64_t rank = 0; rank < world; ++rank) {
    absl::StatusOr<WrittenFile> file = WriteRankFile(absl::StrCat(dir, "/rank", rank, ".pt"), StateFor(step, world, rank));
    ASSERT_TRUE(file.ok()) << file.status();
    files.push_back(*file);
  }
  ASSERT_TRUE(WriteManifest(dir, MakeManifest(StateFor(step, world, 0), config, files)).ok());
}

TEST(CheckpointFilesTest, OnlyCommittedStepsAreFound) {
  std::string root = FreshDir("found");
  EXPECT_FALSE(FindNewestCommittedStep(root + "/missing")->has_value());
  WriteStep(root, 3, 2);
  WriteStep(root, 4, 2);
  fs::remove(root + "/step-00000004/manifest.json");  // step 4 was never committed
  fs::create_directories(root + "/step-00000009");    // nor 9
  auto newest = FindNewestCommittedStep(root);
  ASSERT_TRUE(newest.ok() && newest->has_value());
  EXPECT_EQ((*newest)->manifest.step(), 3);
  // Cleaning leaves only the committed step, without temporaries.
  std::ofstream(root + "/step-00000003/rank1.pt.tmp.12345") << "half";
  std::ofstream(root + "/rank0.pt.tmp.777") << "half";
  absl::StatusOr<std::vector<std::string>> removed = CleanCheckpointRoot(root, 0);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, (std::vector<std::string>{"step-00000004/", "step-00000009/", "rank0.pt.tmp.777",
                                                "step-00000003/rank1.pt.tmp.12345"}));
  EXPECT_EQ(Listing(root), (std::vector<std::string>{"step-00000003", "step-00000003/manifest.json",
                                                     "step-00000003/rank0.pt", "step-00000003/rank1.pt"}));
  EXPECT_TRUE(CleanCheckpointRoot(root, 0)->empty());
}

TEST(CheckpointFilesTest, ACorruptManifestIsAnErrorNotSkipped) {
  std::string root = FreshDir("corrupt");
  WriteStep(root, 1, 1);
  WriteStep(root, 2, 1);
  std::string path = root + "/step-00000002/manifest.json";
  std::string json = *ReadFile(path);
  size_t at = json.find("\"world_size\": \"1\"");
  ASSERT_NE(at, std::string::npos) << json;
  json.replace(at, 17, "\"world_size\": \"2\"");
  ASSERT_TRUE(WriteFileAtomically(path, json).ok());
  auto newest = FindNewestCommittedStep(root);
  EXPECT_EQ(newest.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(newest.status().message().find(path + " is corrupt: its checksum is"), std::string::npos)
      << newest.status();
  ASSERT_TRUE(WriteFileAtomically(path, "{not json").ok());
  EXPECT_EQ(FindNewestCommittedStep(root).status().code(), absl::StatusCode::kDataLoss);
}

TEST(CheckpointFilesTest, AnotherModelOrConfigIsRefusedNamingTheDifference) {
  std::string root = FreshDir("mismatch");
  WriteStep(root, 1, 2);
  auto newest = FindNewestCommittedStep(root);
  ASSERT_TRUE(newest.ok() && newest->has_value());
  auto other_config = ReadRankState(**newest, StateFor(0, 2, 0), std::string("another run"), 2, 0);
  EXPECT_EQ(other_config.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(other_config.status().message().find("was written by the run configuration 'checkpoint test v1'; this run is "
                                                 "'another run'"),
            std::string::npos)
      << other_config.status();
  RankState bigger = StateFor(0, 2, 0);
  bigger.full_shapes["a.weight.shard"] = {8, 3};
  auto other_shape = ReadRankState(**newest, bigger, std::string(kConfig), 2, 0);
  EXPECT_EQ(other_shape.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(other_shape.status().message().find("'a.weight.shard' is Float[7,3] (shard_dim0), this run has Float[8,3]"),
            std::string::npos)
      << other_shape.status();
  RankState fewer = StateFor(0, 2, 0);
  fewer.per_rank.erase("buffer.stat");
  auto extra = ReadRankState(**newest, fewer, std::string(kConfig), 2, 0);
  EXPECT_NE(extra.status().message().find("has tensor 'buffer.stat', which this run does not"), std::string::npos)
      << extra.status();
  EXPECT_TRUE(ReadRankState(**newest, fewer, std::string(kConfig), 2, 0, /*allow_unused=*/true).ok());
  EXPECT_TRUE(ReadRankState(**newest, fewer, std::nullopt, 2, 0, /*allow_unused=*/true).ok());
}

// Resharding without processes: every rank of every world size gets exactly its rows.
TEST(CheckpointFilesTest, ReshardsToEveryWorldSize) {
  std::string root = FreshDir("reshard_files");
  WriteStep(root, 7, 3);
  auto newest = FindNewestCommittedStep(root);
  ASSERT_TRUE(newest.ok() && newest->has_value());
  for (int64_t world : {1, 2, 3, 4, 5, 8}) {
    for (int64_t rank = 0; rank < world; ++rank) {
      auto state = ReadRankState(**newest, StateFor(0, world, rank), std::string(kConfig), world, rank);
      ASSERT_TRUE(state.ok()) << state.status();
      EXPECT_EQ(Mismatch(*state, 7, world, rank, 3), "") << world << " ranks, rank " << rank;
    }
  }
}

TEST(CheckpointFilesTest, TheOldPerRankFormatIsNotResumed) {
  // LoadCommittedCheckpoint needs a communicator: one rank of a world of one.
  std::string dir = FreshDir("legacy");
  std::string root = dir + "/ckpt";
  fs::create_directories(root);
  std::ofstream(root + "/rank0.pt") << "old";
  LaunchResult loaded =
      Launch(1, "load", {{"MAGI_CKPT_ROOT", root}, {"MAGI_CKPT_EXPECT", "3"}, {"MAGI_TEST_OUT", dir}});
  EXPECT_NE(loaded.exit_code, 0);
  std::string message = ReadRankMessage(dir, 0);
  EXPECT_NE(message.find("NOT_FOUND: no committed checkpoint under " + root +
                         " (it holds rank<r>.pt files of the per-rank format"),
            std::string::npos)
      << message;
}

// A resume removes what no committed step needs; a read-only load (inference, which may
// run while a trainer saves its next step there) removes nothing.
TEST(CheckpointTest, OnlyAResumeCleansTheFolder) {
  std::string dir = FreshDir("readonly");
  std::string root = dir + "/ckpt";
  ASSERT_EQ(Launch(2, "save", {{"MAGI_CKPT_ROOT", root}, {"MAGI_CKPT_STEPS", "3"}}).exit_code, 0);
  // A save of step 4 in progress: rank 0's file renamed, rank 1's still a temporary.
  fs::create_directories(root + "/step-00000004");
  fs::copy_file(root + "/step-00000003/rank0.pt", root + "/step-00000004/rank0.pt");
  std::ofstream(root + "/step-00000004/rank1.pt.tmp.4242") << "half";
  const std::vector<std::string> before = Listing(root);
  ASSERT_EQ(before.size(), 7u);
  EXPECT_EQ(Launch(2, "load", {{"MAGI_CKPT_ROOT", root}, {"MAGI_CKPT_EXPECT", "3"}, {"MAGI_CKPT_READ_ONLY", "1"}})
                .exit_code,
            0);
  EXPECT_EQ(Listing(root), before);
  EXPECT_EQ(Launch(2, "load", {{"MAGI_CKPT_ROOT", root}, {"MAGI_CKPT_EXPECT", "3"}}).exit_code, 0);
  EXPECT_EQ(Listing(root), (std::vector<std::string>{"step-00000003", "step-00000003/manifest.json",
                                                     "step-00000003/rank0.pt", "step-00000003/rank1.pt"}));
}

TEST(CheckpointTest, ACommittedStepIsNeverRewritten) {
  std::string dir = FreshDir("rewrite");
  std::string root = dir + "/ckpt";
  ASSERT_EQ(Launch(1, "save", {{"MAGI_CKPT_ROOT", root}, {"MAGI_CKPT_STEPS", "2"}}).exit_code, 0);
  std::string before = *ReadFile(root + "/step-00000002/rank0.pt");
  LaunchResult again = Launch(1, "save", {{"MAGI_CKPT_ROOT", root}, {"MAGI_CKPT_STEPS", "2"}, {"MAGI_TEST_OUT", dir}});
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(ReadRankMessage(dir, 0).find("ALREADY_EXISTS: step 2 is already committed"), std::string::npos)
      << ReadRankMessage(dir, 0);
  EXPECT_EQ(*ReadFile(root + "/step-00000002/rank0.pt"), before);
}

}  // namespace
}  // namespace magi

int main(int argc, char** argv) {
  magi::g_self = argv[0];
  if (const char* scenario = std::getenv("MAGI_CKPT_WORKER")) return magi::RunWorker(scenario);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
