// FSDP training of FX-imported joint graphs on real processes (CPU + Gloo), checked
// against PyTorch's own data-parallel training of the same model (tools/fx_train_reference.py:
// same initial state, same per-rank batches, torch.optim.AdamW), both produced at build time.
//
// The test binary is its own worker: a gtest case launches it with the local launcher
// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and MAGI_FX_WORKER naming the model.
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
#include "magi/frontend/fx/fx_importer.h"
#include "magi/frontend/fx/fx_trainer.h"
#include "magi/runtime/distributed/launcher.h"
#include "magi/runtime/distributed/rendezvous.h"
#include "magi/runtime/gloo/gloo_communicator.h"

namespace magi {
namespace {

std::string g_self;  // path of this binary
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
  return {dir + "exported/resnet18_joint.fx.json", dir + "reference/resnet18",
          {"layer1", "layer2", "layer3", "layer4", ""}};
}

// Reads PREFIX.ref.txt / PREFIX.ref.bin (see tools/fx_train_reference.py).
absl::StatusOr<std::map<std::string, at::Tensor>> ReadReference(const std::string& prefix) {
  std::ifstream bin(prefix + ".ref.bin", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(bin)), std::istreambuf_iterator<char>());
  std::ifstream txt(prefix + ".ref.txt");
  if (!bin.good() && bytes.empty()) return absl::NotFoundError(absl::StrCat("cannot read ", prefix, ".ref.bin"));
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
    at::ScalarType type = dtype == "float32" ? at::kFloat : dtype == "int64" ? at::kLong : dtype == "float64"
                                                                                  ? at::kDouble
                                                                                  : at::kInt;
    if (fields.fail() || offset + nbytes > static_cast<int64_t>(bytes.size())) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, ".ref.txt:", line_number, ": malformed: ", line));
    }
    at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(type));
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

// Tolerances (fp32): losses relative 1e-5; parameters and buffers absolute 1e-5 scaled by
// max(1, |reference|). Magi runs the same ATen kernels; what differs is the order of the
// gradient average (reduce-scatter vs the reference's sum) and AdamW's fused update.
constexpr double kLossTolerance = 1e-5;
constexpr double kTensorTolerance = 1e-5;

int RunWorker(const std::string& model) {
  absl::StatusOr<DistributedEnv> env = DistributedEnvFromEnvironment();
  if (!env.ok()) return Fail(std::string(env.status().message()));
  auto store = ConnectStore(*env, std::chrono::seconds(60));
  if (!store.ok()) return Fail(std::string(store.status().message()));
  auto communicator = CreateGlooCommunicator(*store, env->rank, env->world_size, "dp", std::chrono::seconds(120));
  if (!communicator.ok()) return Fail(std::string(communicator.status().message()));
  const ModelCase c = CaseFor(model);
  absl::StatusOr<std::map<std::string, at::Tensor>> ref = ReadReference(c.reference);
  if (!ref.ok()) return Fail(std::string(ref.status().message()));
  absl::StatusOr<FxImport> imported = ImportFxFile(c.joint);
  if (!imported.ok()) return Fail(std::string(imported.status().message()));
  FxTrainOptions options;
  options.shard_groups = c.groups;
  absl::StatusOr<std::unique_ptr<FxTrainer>> trainer = FxTrainer::Create(std::move(*imported), *communicator, options);
  if (!trainer.ok()) return Fail(std::string(trainer.status().message()));
  const std::string w = absl::StrCat("w", env->world_size, "/");
  double worst_loss = 0;
  for (int step = 0; step < kSteps; ++step) {
    const std::string prefix = absl::StrCat(w, "step", step, "/rank", env->rank, "/");
    std::vector<at::Tensor> batch;
    for (const std::string& name : (*trainer)->data_inputs()) {
      auto it = ref->find(prefix + name);
      if (it == ref->end()) return Fail("the reference has no " + prefix + name);
      batch.push_back(it->second);
    }
    absl::StatusOr<double> loss = (*trainer)->Step(batch);
    if (!loss.ok()) return Fail(std::string(loss.status().message()));
    double want = ref->at(prefix + "loss").item<double>();
    double diff = std::abs(*loss - want);
    worst_loss = std::max(worst_loss, diff / std::max(1.0, std::abs(want)));
    std::cout << "rank " << env->rank << " step " << step << " loss " << *loss << " (PyTorch " << want << ")\n";
    if (diff > kLossTolerance * std::max(1.0, std::abs(want))) {
      return Fail(absl::StrCat("rank ", env->rank, " step ", step, ": loss ", *loss, " vs PyTorch ", want));
    }
  }
  auto params = (*trainer)->GatherFullParameters();
  if (!params.ok()) return Fail(std::string(params.status().message()));
  double worst = 0;
  auto compare = [&](const std::string& what, const at::Tensor& got, const at::Tensor& want) -> bool {
    if (!got.sizes().equals(want.sizes())) {
      Fail(what + ": shape differs from PyTorch's");
      return false;
    }
    double scale = std::max(1.0, want.to(at::kDouble).abs().max().item<double>());
    double diff = (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>() / scale;
    worst = std::max(worst, diff);
    if (diff > kTensorTolerance) {
      Fail(what + " differs from PyTorch's by " + std::to_string(diff));
      return false;
    }
    return true;
  };
  size_t checked = 0;
  for (const auto& [name, value] : *params) {
    auto it = ref->find(w + "param/" + name);
    if (it == ref->end()) return Fail("the reference has no parameter " + name);
    if (!compare(name, value, it->second)) return 1;
    ++checked;
  }
  size_t buffers = 0;
  const std::string buffer_prefix = absl::StrCat(w, "rank", env->rank, "/buffer/");
  for (const auto& [key, want] : *ref) {
    if (key.rfind(buffer_prefix, 0) != 0) continue;
    std::string name = key.substr(buffer_prefix.size());
    auto it = (*trainer)->buffers().find(name);
    if (it == (*trainer)->buffers().end()) return Fail("the trainer has no buffer " + name);
    if (!compare(name, it->second, want)) return 1;
    ++buffers;
  }
  std::cout << "rank " << env->rank << ": " << kSteps << " steps, losses within " << worst_loss << " (relative), "
            << checked << " parameters and " << buffers << " buffers within " << worst << " of PyTorch\n";
  return 0;
}

int Launch(int world, const std::string& model) {
  absl::StatusOr<LaunchResult> result = LaunchLocalWorkers(world, {g_self}, {{"MAGI_FX_WORKER", model}});
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? result->exit_code : -1;
}

TEST(FxTrainingTest, LlamaMatchesPyTorchOnOneRank) { EXPECT_EQ(Launch(1, "llama"), 0); }
TEST(FxTrainingTest, LlamaMatchesPyTorchOnTwoRanks) { EXPECT_EQ(Launch(2, "llama"), 0); }
TEST(FxTrainingTest, LlamaMatchesPyTorchOnFourRanks) { EXPECT_EQ(Launch(4, "llama"), 0); }
TEST(FxTrainingTest, Resnet18MatchesPyTorchOnOneRank) { EXPECT_EQ(Launch(1, "resnet18"), 0); }
TEST(FxTrainingTest, Resnet18MatchesPyTorchOnTwoRanks) { EXPECT_EQ(Launch(2, "resnet18"), 0); }
TEST(FxTrainingTest, Resnet18MatchesPyTorchOnFourRanks) { EXPECT_EQ(Launch(4, "resnet18"), 0); }

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
  EXPECT_EQ(missing.status().message(),
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
