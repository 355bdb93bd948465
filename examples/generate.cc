// Generates text with a model trained by examples:train, through the full-graph FSDP
// inference path: one graph per rank holding the all-gathers and the forward.
//
//   tools/bazel run //examples:train
//   tools/bazel run //examples:generate -- --prompt="Sonnet 7" --length=300
//
// It runs on --world_size local processes (any number: each rank rebuilds its shards from
// the newest committed step in --checkpoint_dir, whatever world size trained it) and
// decodes greedily (or samples with --temperature > 0): every step runs the captured
// forward on the last --seq_len bytes.
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "magi/frontend/fsdp/fsdp.h"
#include "magi/models/llama.h"
#include "magi/runtime/distributed/launcher.h"
#include "magi/runtime/distributed/rendezvous.h"
#include "magi/runtime/gloo/gloo_communicator.h"

ABSL_FLAG(int, world_size, 2, "Processes (any number: the checkpoint's shards are rebuilt for them)");
ABSL_FLAG(std::string, model, "tiny", "The --model the checkpoint was trained with");
ABSL_FLAG(std::string, checkpoint_dir, "/tmp/magi_train/checkpoint",
          "Where examples:train wrote its checkpoint: the newest committed step-<N>/ is read");
ABSL_FLAG(std::string, prompt, "Sonnet 155\n\n", "Text to continue");
ABSL_FLAG(int, length, 200, "Bytes to generate");
ABSL_FLAG(int, seq_len, 64, "Context window in bytes (the --seq_len of training)");
ABSL_FLAG(double, temperature, 0.0, "0: greedy; otherwise sample from softmax(logits / temperature)");
ABSL_FLAG(int, seed, 0, "Sampling seed (the same on every rank)");

namespace {

int Fail(int rank, absl::string_view message) {
  std::fprintf(stderr, "[rank %d] error: %s\n", rank, std::string(message).c_str());
  return 1;
}

int Generate(const magi::DistributedEnv& env) {
  const int rank = env.rank;
  magi::models::LlamaConfig config =
      absl::GetFlag(FLAGS_model) == "small" ? magi::models::LlamaConfig::Small() : magi::models::LlamaConfig::Tiny();
  config.vocab_size = 256;
  const int seq = absl::GetFlag(FLAGS_seq_len);
  config.max_seq_len = std::max<int64_t>(config.max_seq_len, seq);
  auto timeout = std::chrono::seconds(120);
  auto store = magi::ConnectStore(env, timeout);
  if (!store.ok()) return Fail(rank, store.status().message());
  auto communicator = magi::CreateGlooCommunicator(*store, rank, env.world_size, "dp", timeout);
  if (!communicator.ok()) return Fail(rank, communicator.status().message());
  auto mesh = magi::DeviceMesh::Create({env.world_size}, {"dp"}, rank);
  if (!mesh.ok()) return Fail(rank, mesh.status().message());
  magi::models::Llama model(config);
  for (auto& layer : model->layers) magi::FullyShard(*layer, *mesh);
  magi::FullyShard(*model, *mesh);
  model->eval();

  at::Tensor window = torch::full({1, seq}, static_cast<int64_t>(' '), torch::kLong);
  magi::ForwardFunction forward = [&](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{model->forward(in[0])};
  };
  auto inference = magi::FsdpInference::Create(*model, forward, {window}, *communicator);
  if (!inference.ok()) return Fail(rank, inference.status().message());
  absl::Status loaded = (*inference)->LoadShardsFromCheckpoint(absl::GetFlag(FLAGS_checkpoint_dir));
  if (!loaded.ok()) return Fail(rank, loaded.message());

  std::string text = absl::GetFlag(FLAGS_prompt);
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(absl::GetFlag(FLAGS_seed));
  const double temperature = absl::GetFlag(FLAGS_temperature);
  if (rank == 0) std::fputs(text.c_str(), stdout);
  for (int i = 0; i < absl::GetFlag(FLAGS_length); ++i) {
    // The last `seq` bytes, left-padded with spaces.
    std::vector<int64_t> context(seq, ' ');
    size_t take = std::min<size_t>(text.size(), static_cast<size_t>(seq));
    for (size_t j = 0; j < take; ++j) {
      context[seq - take + j] = static_cast<unsigned char>(text[text.size() - take + j]);
    }
    at::Tensor tokens = torch::tensor(context, torch::kLong).view({1, seq});
    auto outputs = (*inference)->Run({tokens});
    if (!outputs.ok()) return Fail(rank, outputs.status().message());
    at::Tensor logits = (*outputs)[0][0][seq - 1];
    int64_t next = 0;
    if (temperature <= 0) {
      next = logits.argmax().item<int64_t>();
    } else {
      at::Tensor probs = torch::softmax(logits / temperature, -1);
      next = at::multinomial(probs, 1, false, generator).item<int64_t>();
    }
    text.push_back(static_cast<char>(next));
    if (rank == 0) {
      std::fputc(static_cast<int>(next), stdout);
      std::fflush(stdout);
    }
  }
  if (rank == 0) std::fputc('\n', stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (std::optional<int> code = magi::RunLocalWorkersIfLauncher(absl::GetFlag(FLAGS_world_size), argc, argv)) {
    return *code;
  }
  absl::StatusOr<magi::DistributedEnv> env = magi::DistributedEnvFromEnvironment();
  if (!env.ok()) return Fail(0, env.status().message());
  return Generate(*env);
}
