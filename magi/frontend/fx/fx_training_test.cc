// FSDP training of FX-imported joint graphs on real processes (CPU + Gloo), checked
// against PyTorch's own data-parallel training of the same model (tools/fx_train_reference.py:
// same initial state, same per-rank batches, torch.optim.AdamW), both produced at build time.
//
// The test binary is its own worker: a gtest case launches it with the local launcher
// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and MAGI_FX_WORKER naming the model; with
// MAGI_FX_RESUME_DIR the same processes then check a checkpoint resume against that run.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "magi/base/status_macros.h"
#include "magi/frontend/fx/fx_importer.h"
#include "magi/frontend/fx/fx_trainer.h"
#include "magi/runtime/distributed/launcher.h"
#include "magi/runtime/distributed/rendezvous.h"
#include "magi/runtime/gloo/gloo_communicator.h"
#include "magi/training/checkpoint.h"

namespace magi {
namespace {

std::string g_self;        // path of this binary
constexpr int kSteps = 4;  // as in the BUILD's reference genrules

struct ModelCase {
  std::string joint;      // the exported joint graph
  std::string reference;  // fx_train_reference.py's output prefix
  std::vector<std::string> groups;
};

ModelCase CaseFor(const std::string& model) {
  const std::string dir = "magi/frontend/fx/";
  if (model == "llama") {
    return {dir + "exported/llama_joint.fx.json", dir + "reference/llama", {"layers.0", "layers.1", ""}};
  }
  return {dir + "exported/resnet18_train_joint.fx.json",
          dir + "reference/resnet18_train",
          {"layer1", "layer2", "layer3", "layer4", ""}};
}

// Reads PREFIX.ref.txt / PREFIX.ref.bin (see tools/fx_train_reference.py).
absl::StatusOr<std::map<std::string, at::Tensor>> ReadReference(const std::string& prefix) {
  std::ifstream bin(prefix + ".ref.bin", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(bin)), std::istreambuf_iterator<char>());
  std::ifstream txt(prefix + ".ref.txt");
  if (bytes.empty() || !txt.is_open()) return absl::NotFoundError(absl::StrCat("cannot read ", prefix, ".ref.*"));
  std::map<std::string, at::Tensor> out;
  std::string line;
  int line_number = 0;
  while (std::getline(txt, line)) {
    ++line_number;
    std::istringstream fields(line);
    std::string name, dtype;
    int64_t offset = 0, nbytes = 0, ndim = 0;
    fields >> name >> dtype >> offset >> nbytes >> ndim;
    std::vector<int64_t> sizes(ndim);
    for (int64_t& s : sizes) fields >> s;
    static const auto* kTypes = new std::map<std::string, at::ScalarType>{
        {"float32", at::kFloat}, {"float64", at::kDouble}, {"int64", at::kLong}, {"int32", at::kInt}};
    auto type = kTypes->find(dtype);
    if (type == kTypes->end()) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, ".ref.txt:", line_number, ": unknown dtype ", dtype));
    }
    if (fields.fail() || offset + nbytes > static_cast<int64_t>(bytes.size())) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, ".ref.txt:", line_number, ": malformed: ", line));
    }
    at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(type->second));
    if (t.nbytes() != static_cast<size_t>(nbytes)) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, ".ref.txt:", line_number, ": size mismatch"));
    }
    std::memcpy(t.data_ptr(), bytes.data() + offset, nbytes);
    out[name] = t;
  }
  if (out.empty()) return absl::NotFoundError(absl::StrCat("no tensors in ", prefix, ".ref.txt"));
  return out;
}

int Fail(const std::string& message) {
  std::cerr << "worker failed: " << message << std::endl;
  return 1;
}

// Tolerances (fp32), relative to max(1, |PyTorch's value|). Magi runs the same ATen kernels;
// what differs is rounding: the order of the gradient average (reduce-scatter vs the
// reference's sum) and AdamW's fused update. On the Llama twin that stays at rounding level
// (observed 3e-7), so 1e-5 holds for every step. resnet18 with BatchNorm on 4 images is
// chaotic under AdamW: in PyTorch alone, multiplying every gradient element by
// (1 + 1e-7 * randn), i.e. about one fp32 ulp, moves the losses of steps 2 and 3 by 2e-5 and
// 7.5e-5 and parameters by up to ~lr where a gradient is at rounding level (AdamW's first
// steps normalize it to +-lr), and running statistics by up to 1.2% (relative, elementwise).
// Per tensor, though, the difference stays small in L2: at most 3% (world 1) and 8.1%
// (world 2, bn1.bias) of the parameter's movement over the 4 steps, 0.3% of a running
// statistic. So resnet18 is held to 1e-5 for the losses of the first two steps, each
// parameter to 20% of its movement in L2 (|magi - torch| <= 0.2 |torch - init|) and each
// buffer to 1% in L2 (|magi - torch| <= 0.01 |torch|); the Llama twin checks AdamW itself
// elementwise. The late losses are held to 5e-3: on world 2, the same one-ulp noise moves
// PyTorch's own step-3 loss of rank 1 from 2.39246 to 2.39640 (1.6e-3), which is where
// Magi's lands too.
struct Tolerance {
  double early_loss = 1e-5;  // steps 0 and 1
  double late_loss = 1e-5;   // steps 2 on
  double tensors = 1e-5;     // elementwise, final parameters and buffers (0: not checked)
  double movement = 0;       // L2, parameters, relative to PyTorch's movement (0: not checked)
  double buffers_l2 = 0;     // L2, buffers, relative to PyTorch's (0: not checked)
};

Tolerance ToleranceFor(const std::string& model) {
  if (model == "llama") return {};
  return {1e-5, 5e-3, 0, 0.2, 1e-2};
}

// This worker's Gloo communicator over all ranks (the launcher's RANK, WORLD_SIZE, MASTER_*),
// with the rendezvous store it came from: the store must outlive the worker's use of the
// group (rank 0's store object is the TCPStore server the slower ranks still read from).
struct GlooWorld {
  c10::intrusive_ptr<c10d::Store> store;
  std::shared_ptr<Communicator> communicator;
};

absl::StatusOr<GlooWorld> ConnectGloo(const DistributedEnv& env) {
  GlooWorld world;
  MAGI_ASSIGN_OR_RETURN(world.store, ConnectStore(env, std::chrono::seconds(60)));
  MAGI_ASSIGN_OR_RETURN(world.communicator, CreateGlooCommunicator(world.store, env.rank, env.world_size, "dp",
                                                                  std::chrono::seconds(120)));
  return world;
}

// Rank `rank`'s batch of step `step` of the reference run at world size `w` ("w2/"), in the
// trainer's data_inputs() order.
absl::StatusOr<std::vector<at::Tensor>> ReferenceBatch(const std::map<std::string, at::Tensor>& ref,
                                                       const FxTrainer& trainer, const std::string& w, int step,
                                                       int rank) {
  const std::string prefix = absl::StrCat(w, "step", step, "/rank", rank, "/");
  std::vector<at::Tensor> batch;
  for (const std::string& name : trainer.data_inputs()) {
    auto it = ref.find(prefix + name);
    if (it == ref.end()) return absl::NotFoundError("the reference has no " + prefix + name);
    batch.push_back(it->second);
  }
  return batch;
}

// Checkpoints: the straight run of kSteps steps (RunWorker's, checked against PyTorch) against
// one that saves after 2 steps and a new trainer (a new import, as a restarted process has) that
// loads that checkpoint and takes the rest: the resumed losses, AdamW state and buffers
// (BatchNorm's running statistics) must be bitwise the straight run's, and the resumed trainer
// must have counted the steps.
absl::Status CheckResume(const std::string& model, const std::string& root, const DistributedEnv& env,
                         const GlooWorld& world, const std::map<std::string, at::Tensor>& ref,
                         const FxTrainer& straight, const std::vector<double>& straight_losses) {
  const ModelCase c = CaseFor(model);
  auto make_trainer = [&]() -> absl::StatusOr<std::unique_ptr<FxTrainer>> {
    MAGI_ASSIGN_OR_RETURN(FxImport imported, ImportFxFile(c.joint));
    FxTrainOptions options;
    options.shard_groups = c.groups;
    return FxTrainer::Create(std::move(imported), world.communicator, options);
  };
  const std::string w = absl::StrCat("w", env.world_size, "/");
  auto run = [&](FxTrainer& trainer, int from, int to, std::vector<double>& losses) -> absl::Status {
    for (int step = from; step < to; ++step) {
      MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> batch, ReferenceBatch(ref, trainer, w, step, env.rank));
      MAGI_ASSIGN_OR_RETURN(double loss, trainer.Step(batch));
      losses.push_back(loss);
    }
    return absl::OkStatus();
  };
  std::vector<double> first_losses, resumed_losses;
  MAGI_ASSIGN_OR_RETURN(std::unique_ptr<FxTrainer> first, make_trainer());
  MAGI_RETURN_IF_ERROR(run(*first, 0, 2, first_losses));
  CheckpointOptions save;
  save.config = model;
  if (absl::Status s = first->SaveCheckpoint(root, save); !s.ok()) {
    return absl::InternalError(absl::StrCat("save: ", s.message()));
  }

  MAGI_ASSIGN_OR_RETURN(std::unique_ptr<FxTrainer> resumed, make_trainer());
  absl::Status wrong_config = resumed->LoadCheckpoint(root, "another model");
  if (wrong_config.ok()) return absl::InternalError("a checkpoint of another config was loaded");
  if (absl::Status s = resumed->LoadCheckpoint(root, model); !s.ok()) {
    return absl::InternalError(absl::StrCat("load: ", s.message()));
  }
  if (resumed->steps_taken() != 2) {
    return absl::InternalError(absl::StrCat("the resumed trainer counts ", resumed->steps_taken()));
  }
  MAGI_RETURN_IF_ERROR(run(*resumed, 2, kSteps, resumed_losses));

  for (int step = 2; step < kSteps; ++step) {
    if (resumed_losses[step - 2] != straight_losses[step]) {
      return absl::InternalError(absl::StrCat("step ", step, ": resumed loss ", resumed_losses[step - 2],
                                              " vs straight ", straight_losses[step]));
    }
  }
  auto bitwise = [](const std::map<std::string, at::Tensor>& got, const std::map<std::string, at::Tensor>& want,
                    const std::string& what) -> std::string {
    if (got.size() != want.size()) return what + ": different tensors";
    for (const auto& [name, tensor] : want) {
      auto it = got.find(name);
      if (it == got.end() || !at::equal(it->second, tensor)) return what + " " + name + " differs";
    }
    return "";
  };
  for (const std::string& failure : {bitwise(resumed->state(), straight.state(), "AdamW state"),
                                     bitwise(resumed->buffers(), straight.buffers(), "buffer")}) {
    if (!failure.empty()) return absl::InternalError("resumed vs straight: " + failure);
  }
  if (env.rank == 0) {
    std::cout << model << ", world " << env.world_size << ": resumed after 2 of " << kSteps << " steps, "
              << straight.state().size() << " state tensors and " << straight.buffers().size()
              << " buffers bitwise the straight run's (wrong config refused: " << wrong_config.message() << ")\n";
  }
  return absl::OkStatus();
}

int RunWorker(const std::string& model) {
  absl::StatusOr<DistributedEnv> env = DistributedEnvFromEnvironment();
  if (!env.ok()) return Fail(std::string(env.status().message()));
  absl::StatusOr<GlooWorld> world = ConnectGloo(*env);
  if (!world.ok()) return Fail(std::string(world.status().message()));
  const ModelCase c = CaseFor(model);
  const Tolerance tolerance = ToleranceFor(model);
  absl::StatusOr<std::map<std::string, at::Tensor>> ref = ReadReference(c.reference);
  if (!ref.ok()) return Fail(std::string(ref.status().message()));
  absl::StatusOr<FxImport> imported = ImportFxFile(c.joint);
  if (!imported.ok()) return Fail(std::string(imported.status().message()));
  std::map<std::string, at::Tensor> initial;  // the imported parameters, before training
  for (const Value* input : imported->graph().inputs()) {
    if (input->role() == InputRole::kParam) initial[input->name()] = imported->tensors.at(input->name()).clone();
  }
  FxTrainOptions options;
  options.shard_groups = c.groups;
  // A pass pipeline after sharding (MAGI_FX_PASSES): the same compile path as FsdpTrainer's.
  if (const char* passes = std::getenv("MAGI_FX_PASSES")) options.compile.optimization.passes = passes;
  absl::StatusOr<std::unique_ptr<FxTrainer>> trainer =
      FxTrainer::Create(std::move(*imported), world->communicator, options);
  if (!trainer.ok()) return Fail(std::string(trainer.status().message()));
  if (!options.compile.optimization.passes.empty() && (*trainer)->applied_pipeline().empty()) {
    return Fail("the pass pipeline " + options.compile.optimization.passes + " was not applied");
  }
  const std::string w = absl::StrCat("w", env->world_size, "/");
  double worst_loss = 0;
  std::vector<double> losses;
  for (int step = 0; step < kSteps; ++step) {
    absl::StatusOr<std::vector<at::Tensor>> batch = ReferenceBatch(*ref, **trainer, w, step, env->rank);
    if (!batch.ok()) return Fail(std::string(batch.status().message()));
    absl::StatusOr<double> loss = (*trainer)->Step(*batch);
    if (!loss.ok()) return Fail(std::string(loss.status().message()));
    losses.push_back(*loss);
    double want = ref->at(absl::StrCat(w, "step", step, "/rank", env->rank, "/loss")).item<double>();
    double diff = std::abs(*loss - want);
    worst_loss = std::max(worst_loss, diff / std::max(1.0, std::abs(want)));
    std::cout << "rank " << env->rank << " step " << step << " loss " << *loss << " (PyTorch " << want << ")\n";
    const double allowed = step < 2 ? tolerance.early_loss : tolerance.late_loss;
    if (diff > allowed * std::max(1.0, std::abs(want))) {
      return Fail(absl::StrCat("rank ", env->rank, " step ", step, ": loss ", *loss, " vs PyTorch ", want));
    }
  }
  auto params = (*trainer)->GatherFullParameters();
  if (!params.ok()) return Fail(std::string(params.status().message()));
  double worst = 0;
  // `init`: the parameter's initial value (movement check), undefined for buffers.
  auto compare = [&](const std::string& what, const at::Tensor& got, const at::Tensor& want,
                     const at::Tensor& init) -> bool {
    if (!got.sizes().equals(want.sizes())) {
      Fail(what + ": shape differs from PyTorch's");
      return false;
    }
    at::Tensor g = got.to(at::kDouble), w = want.to(at::kDouble);
    double diff = 0, allowed = 0;
    if (tolerance.tensors > 0) {
      diff = (g - w).abs().max().item<double>() / std::max(1.0, w.abs().max().item<double>());
      allowed = tolerance.tensors;
    } else if (init.defined()) {
      diff = (g - w).norm().item<double>() / std::max(1e-12, (w - init.to(at::kDouble)).norm().item<double>());
      allowed = tolerance.movement;
    } else {
      diff = (g - w).norm().item<double>() / std::max(1e-12, w.norm().item<double>());
      allowed = tolerance.buffers_l2;
    }
    worst = std::max(worst, diff);
    if (diff > allowed) {
      Fail(what + " differs from PyTorch's by " + std::to_string(diff) + " (allowed " + std::to_string(allowed) + ")");
      return false;
    }
    return true;
  };
  size_t checked = 0;
  for (const auto& [name, value] : *params) {
    auto it = ref->find(w + "param/" + name);
    if (it == ref->end()) return Fail("the reference has no parameter " + name);
    if (!compare(name, value, it->second, initial.at(name))) return 1;
    ++checked;
  }
  size_t buffers = 0;
  const std::string buffer_prefix = absl::StrCat(w, "rank", env->rank, "/buffer/");
  for (const auto& [key, want] : *ref) {
    if (key.rfind(buffer_prefix, 0) != 0) continue;
    std::string name = key.substr(buffer_prefix.size());
    auto it = (*trainer)->buffers().find(name);
    if (it == (*trainer)->buffers().end()) return Fail("the trainer has no buffer " + name);
    if (!compare(name, it->second, want, at::Tensor())) return 1;
    ++buffers;
  }
  std::cout << "rank " << env->rank << ": " << kSteps << " steps, losses within " << worst_loss << " (relative), "
            << checked << " parameters and " << buffers << " buffers within " << worst
            << (tolerance.tensors > 0 ? " (elementwise)" : " (L2, of the movement / of the buffer)") << " of PyTorch\n";
  if (const char* root = std::getenv("MAGI_FX_RESUME_DIR")) {
    absl::Status resumed = CheckResume(model, root, *env, *world, *ref, **trainer, losses);
    if (!resumed.ok()) return Fail(std::string(resumed.message()));
  }
  return 0;
}

int Launch(int world, const std::string& model, std::map<std::string, std::string> env = {}) {
  env["MAGI_FX_WORKER"] = model;
  absl::StatusOr<LaunchResult> result = LaunchLocalWorkers(world, {g_self}, env);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? result->exit_code : -1;
}

TEST(FxTrainingTest, LlamaMatchesPyTorchOnOneRank) { EXPECT_EQ(Launch(1, "llama"), 0); }
TEST(FxTrainingTest, LlamaMatchesPyTorchOnTwoRanks) { EXPECT_EQ(Launch(2, "llama"), 0); }
TEST(FxTrainingTest, LlamaMatchesPyTorchOnFourRanks) { EXPECT_EQ(Launch(4, "llama"), 0); }
TEST(FxTrainingTest, LlamaWithBucketingAndOverlapMatchesPyTorchOnTwoRanks) {
  EXPECT_EQ(Launch(2, "llama", {{"MAGI_FX_PASSES", "bucket-collectives{max_mb=64},schedule-overlap{prefetch=2}"}}), 0);
}
TEST(FxTrainingTest, Resnet18MatchesPyTorchOnOneRank) { EXPECT_EQ(Launch(1, "resnet18_train"), 0); }
// On two ranks the processes that matched PyTorch then resume from a checkpoint (one launch
// of resnet18 less than a case of its own; the resume compares with that same run).
TEST(FxTrainingTest, Resnet18MatchesPyTorchAndResumesBitwiseFromACheckpointOnTwoRanks) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string root = std::string(tmp != nullptr ? tmp : "/tmp") + "/fx_resume_checkpoint";
  EXPECT_EQ(Launch(2, "resnet18_train", {{"MAGI_FX_RESUME_DIR", root}}), 0);
}
TEST(FxTrainingTest, Resnet18MatchesPyTorchOnFourRanks) { EXPECT_EQ(Launch(4, "resnet18_train"), 0); }

TEST(FsdpPlanFromModulePrefixesTest, LongestPrefixClaimsAndErrorsNameTheCause) {
  absl::StatusOr<FxImport> imported = ImportFxFile(CaseFor("llama").joint);
  ASSERT_TRUE(imported.ok()) << imported.status();
  auto plan = FsdpPlanFromModulePrefixes(imported->graph(), {"layers.0", "layers.1", ""}, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->groups.size(), 3u);
  EXPECT_EQ(plan->groups[0].params.front(), "layers.0.attention_norm.weight");
  EXPECT_EQ(plan->groups[2].params.front(), "tok_embeddings.weight");
  for (const std::string& p : plan->groups[2].params) EXPECT_NE(p.rfind("layers.", 0), 0u) << p;
  auto missing = FsdpPlanFromModulePrefixes(imported->graph(), {"layers.0", "layers.1"}, 2);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      missing.status().message(),
      "parameter tok_embeddings.weight of graph @joint is in no FSDP group (name the root \"\" to take the rest)");
  auto empty = FsdpPlanFromModulePrefixes(imported->graph(), {"layers.9", ""}, 2);
  EXPECT_EQ(empty.status().message(), "FSDP group 'layers.9' holds no parameter of graph @joint");
}

}  // namespace
}  // namespace magi

int main(int argc, char** argv) {
  magi::g_self = argv[0];
  if (const char* model = std::getenv("MAGI_FX_WORKER")) return magi::RunWorker(model);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
