// Generates text with a model trained by examples:train, through the full-graph FSDP
// inference path (every graph holds its parameter all-gathers and the forward), with a
// KV cache: a prefill graph over the prompt window and a one-token decode graph at a
// position given as a tensor, the cache donated to both (updated in place), static
// shapes throughout (examples/generation.h has the design; docs/examples.md the output).
//
//   tools/bazel run //examples:train
//   tools/bazel run //examples:generate -- --prompt="Sonnet 7" --length=300
//   tools/bazel run //examples:generate -- --temperature=0.8 --top_k=20 --seed=3
//
// It runs on --world_size local processes (any number: each rank rebuilds its shards from
// the newest committed step in --checkpoint_dir, whatever world size trained it).
// The context is the prompt and the bytes generated so far, at positions 0..; it is at
// most --seq_len bytes: when it would be longer it is cut to its last --overflow_keep
// bytes (default half the window) and prefilled again (printed in the prefill line), so
// long generations stay correct. --kv_cache=false recomputes the whole context window
// for every byte instead (the reference the cache is tested against: greedy output is
// the same bytes, examples/generation_test.cc).
//
// Decoding is greedy, or samples from softmax(logits / --temperature) over the --top_k
// most likely bytes, from one generator per prompt (seeded --seed + prompt index), so
// sampled text depends neither on the batch nor on the world size.
//
// Several prompts (--prompts_file, one per line, "\n" for a newline) decode together,
// --batch_size sequences per graph run (the last batch is padded with repeats of its last
// prompt). --deterministic (docs/deterministic.md) makes every graph batch-invariant:
// each prompt's logits are bitwise the same whatever the batch size and the other
// prompts, with the KV cache as without, so
//   generate --deterministic --prompts_file=P --batch_size=1 --logits_out=/tmp/one
//   generate --deterministic --prompts_file=P --batch_size=8 --logits_out=/tmp/eight
//   magi compare /tmp/one /tmp/eight                 # "identical: ..."
// With the KV cache, --invariant_batch=B (default 8 on the GPU) gives every graph B rows
// and runs the decode step batched at that fixed shape, so batching keeps its speed; the
// runs compared must use the same B (and --batch_size <= B).
//
// It prints tokens/s (bytes/s: the vocabulary is bytes) of the prefill and of the decode
// steps separately, the planned peak memory of the decode graph with and without the
// cache's donation, and, for generations that take a while, a progress line every
// --progress_s seconds.
//
// Throughput on the GPU (tools/deterministic_gpu.sh): --device=cuda --dtype=bf16 --model=1b
// --checkpoint_dir= runs the 1b shape (byte vocabulary) on random weights; --warmup_forwards
// leaves compilation and CUDA start-up out of the timed "magi: generated" line.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <unistd.h>

#include <torch/cuda.h>

#ifdef MAGI_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "examples/compile_flags.h"
#include "examples/flags_usage.h"
#include "examples/tensor_file.h"
#include "magi/comm/communicator.h"
#include "magi/base/file.h"
#include "magi/base/status_macros.h"
#include "magi/backend/megakernel/megakernel_backend.h"
#include "magi/compat/kernel_trace.h"
#include "magi/frontend/fsdp/fsdp.h"
#include "magi/generation/text_generator.h"
#include "magi/ir/printer.h"
#include "magi/models/llama.h"
#include "magi/runtime/deterministic/deterministic.h"
#include "magi/runtime/distributed/launcher.h"
#include "magi/runtime/distributed/rendezvous.h"

ABSL_FLAG(int, world_size, 2, "Processes (any number: the checkpoint's shards are rebuilt for them)");
ABSL_FLAG(std::string, model, "tiny",
          "The --model the checkpoint was trained with: tiny, small, or 1b (the 1b shape with a byte vocabulary, "
          "random weights only: for throughput)");
ABSL_FLAG(int, kv_heads, 0,
          "Key/value heads of random weights (grouped-query attention: fewer than the model's heads, dividing them; "
          "0: as many as the heads). A checkpoint's model has its own");
ABSL_FLAG(std::string, checkpoint_dir, "/tmp/magi_train/checkpoint",
          "Where examples:train wrote its checkpoint: the newest committed step-<N>/ is read; empty: random weights "
          "(seeded by --init_seed)");
ABSL_FLAG(int, init_seed, 0, "Seed of the random weights when --checkpoint_dir is empty");
ABSL_FLAG(std::string, device, "cpu", "cpu (Gloo) or cuda (NCCL; needs a --config=cuda build)");
ABSL_FLAG(std::string, dtype, "f32", "f32 or bf16 (weights and compute)");
ABSL_FLAG(int, warmup_forwards, 0,
          "Untimed runs of each graph before generating (compilation, allocator, CUDA start-up)");
ABSL_FLAG(std::string, prompt, "Sonnet 155\n\n", "Text to continue (not empty)");
ABSL_FLAG(std::string, prompts_file, "",
          "Continue every line of this file instead of --prompt (\"\\n\" in a line stands for a newline)");
ABSL_FLAG(int, batch_size, 1, "Sequences per graph run when there are several prompts");
ABSL_FLAG(int, length, 200, "Bytes to generate after each prompt");
ABSL_FLAG(int, seq_len, 64,
          "Context window in bytes (the --seq_len of training): the KV cache's length, and the sequence length "
          "of the prefill and of --kv_cache=false");
ABSL_FLAG(std::string, prefill_buckets, "",
          "Comma-separated prompt lengths the prefill is compiled for (each prefill runs in the smallest that holds "
          "its longest context; --seq_len is always one); empty: 16, 32, 64, ... below --seq_len. Each bucket is "
          "compiled when first needed (the prompts' before the timed generation)");
ABSL_FLAG(int, overflow_keep, 0,
          "When the context would exceed --seq_len bytes it is cut to its last --overflow_keep bytes and prefilled "
          "again (0: --seq_len / 2)");
ABSL_FLAG(std::string, decode_attention, "fused",
          "The decode graph's attention: fused (the kernel PyTorch picks, cuDNN's on an H100; what the megakernel "
          "backend claims) or math (matmul, masked softmax, matmul, as gpt-fast decodes: partition backends fuse it "
          "with its neighbours)");
ABSL_FLAG(bool, kv_cache, true,
          "Decode with the KV cache (a prefill graph and a one-token decode graph, the cache donated to both); "
          "false: recompute the whole context window for every byte (the reference; the same greedy bytes)");
ABSL_FLAG(double, temperature, 0.0,
          "0: greedy; > 0: sample from softmax(logits / temperature) (finite; NaN, inf and negative values are "
          "refused)");
ABSL_FLAG(int, top_k, 0, "With --temperature > 0: sample among the top_k most likely bytes only (0: all)");
ABSL_FLAG(int, seed, 0,
          "Sampling seed: prompt i's draws come from stream (seed, i), a counter-based draw on the device (the text "
          "depends neither on the batch, the world size nor --tokens_per_read)");
ABSL_FLAG(int, invariant_batch, -1,
          "With --deterministic and the KV cache: every graph has this many rows whatever --batch_size (the rest "
          "padding), and the decode step runs them batched at that fixed shape (docs/deterministic.md); runs compared "
          "must use the same value. 0: every graph unrolled to --batch_size one-sequence copies. -1 (default): 8 on "
          "--device=cuda, 0 on the CPU");
ABSL_FLAG(bool, unrolled_prefill, false,
          "With --invariant_batch > 0: the prefill as one-sequence copies instead of batched at the fixed rows "
          "(slower; for a device whose GEMMs are not computed alike in every tile, docs/deterministic.md)");
ABSL_FLAG(int, tokens_per_read, magi::GenerationOptions().tokens_per_read,
          "Decode steps run back to back on the device and their tokens (and --logits_out's logits) are read back "
          "once per this many steps (fewer at a context overflow); the printed text follows in bursts of as many "
          "bytes. 1: read every step");
ABSL_FLAG(std::string, logits_out, "",
          "Write every prompt's logits of each generated byte (prompt.<i>.logits [length, vocab]) and the bytes "
          "(prompt.<i>.tokens) here as a magi-tensors-v1 file, for `magi compare`");
ABSL_FLAG(std::string, megakernel_timeline, "",
          "With --partition_backends=megakernel on CUDA: write the last decode step's timeline, as the kernel "
          "recorded it per instruction and SM, to this Chrome trace file and print where the step's time went");
ABSL_FLAG(std::string, kernel_trace, "",
          "Record the timed generation's kernels (Kineto, as examples:train --kernel_trace) into this Chrome trace "
          "file on rank 0; tools/kernel_breakdown.py sums it by kernel family");
ABSL_FLAG(std::string, dump_weights, "",
          "Write the model's full parameters (fp32, by name) to this magi-tensors-v1 file on rank 0 before "
          "generating, for PyTorch runs on the same weights (benchmarks/generate_1b.py)");
ABSL_FLAG(std::string, dump_graphs, "",
          "Write rank 0's compiled graphs (text IR, partitions included) here as prefill.mir and decode.mir "
          "(forward.mir with --kv_cache=false)");
ABSL_FLAG(double, progress_s, 5.0, "Seconds between progress lines on stderr (0: none)");

namespace {

// --invariant_batch=-1 on the GPU: the largest batch examples:generate's runs use (tools/deterministic_gpu.sh).
constexpr int kDefaultInvariantBatch = 8;

int Fail(int rank, absl::string_view message) {
  std::fprintf(stderr, "[rank %d] error: %s\n", rank, std::string(message).c_str());
  return 1;
}

// The flags' values that need no model, checked once before any process starts.
absl::Status ValidateFlags() {
  auto at_least = [](const char* flag, int value, int minimum) -> absl::Status {
    if (value >= minimum) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be >= ", minimum, ", not ", value));
  };
  MAGI_RETURN_IF_ERROR(at_least("world_size", absl::GetFlag(FLAGS_world_size), 1));
  MAGI_RETURN_IF_ERROR(at_least("batch_size", absl::GetFlag(FLAGS_batch_size), 1));
  MAGI_RETURN_IF_ERROR(at_least("length", absl::GetFlag(FLAGS_length), 0));
  MAGI_RETURN_IF_ERROR(at_least("seq_len", absl::GetFlag(FLAGS_seq_len), 2));
  MAGI_RETURN_IF_ERROR(at_least("warmup_forwards", absl::GetFlag(FLAGS_warmup_forwards), 0));
  MAGI_RETURN_IF_ERROR(at_least("overflow_keep", absl::GetFlag(FLAGS_overflow_keep), 0));
  const double progress = absl::GetFlag(FLAGS_progress_s);
  if (!std::isfinite(progress) || progress < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--progress_s must be a finite number >= 0 (0: none), not ", progress));
  }
  magi::SamplingOptions sampling;
  sampling.temperature = absl::GetFlag(FLAGS_temperature);
  sampling.top_k = absl::GetFlag(FLAGS_top_k);
  MAGI_RETURN_IF_ERROR(magi::ValidateSampling(sampling, /*vocab_size=*/256));
  MAGI_RETURN_IF_ERROR(magi::ValidateCompileFlags());
  if (absl::GetFlag(FLAGS_prompts_file).empty() && absl::GetFlag(FLAGS_prompt).empty()) {
    return absl::InvalidArgumentError("--prompt is empty (there is nothing to continue)");
  }
  return absl::OkStatus();
}

// The prompts: --prompt, or the lines of --prompts_file with "\n" unescaped.
absl::StatusOr<std::vector<std::string>> Prompts() {
  if (absl::GetFlag(FLAGS_prompts_file).empty()) return std::vector<std::string>{absl::GetFlag(FLAGS_prompt)};
  absl::StatusOr<std::string> text = magi::ReadFile(absl::GetFlag(FLAGS_prompts_file));
  if (!text.ok()) return text.status();
  std::vector<std::string> prompts;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    prompts.push_back(absl::StrReplaceAll(line, {{"\\n", "\n"}}));
  }
  if (prompts.empty()) return absl::InvalidArgumentError(absl::StrCat(absl::GetFlag(FLAGS_prompts_file), " has no prompts"));
  return prompts;
}

double PerSecond(double count, double seconds) { return seconds > 0 ? count / seconds : 0.0; }

int Generate(const magi::DistributedEnv& env) {
  const int rank = env.rank;
  // Ranks on one machine share its cores, as in examples:train.
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    torch::set_num_threads(std::max(1, static_cast<int>(cores) / std::max(1, env.world_size)));
  }
  const bool deterministic = absl::GetFlag(FLAGS_deterministic);
  if (deterministic) {
    absl::StatusOr<std::string> settings = magi::EnableDeterministicMode();  // before anything runs
    if (!settings.ok()) return Fail(rank, settings.status().message());
    if (rank == 0) std::fprintf(stderr, "magi: deterministic mode: %s\n", settings->c_str());
  }
  const std::string device_flag = absl::GetFlag(FLAGS_device);
  if (device_flag != "cpu" && device_flag != "cuda") return Fail(rank, "--device must be cpu or cuda");
  const std::string dtype_flag = absl::GetFlag(FLAGS_dtype);
  if (dtype_flag != "f32" && dtype_flag != "bf16") return Fail(rank, "--dtype must be f32 or bf16");
  if (const std::string attention = absl::GetFlag(FLAGS_decode_attention); attention != "fused" && attention != "math") {
    return Fail(rank, absl::StrCat("--decode_attention must be fused or math, not '", attention, "'"));
  }
  const torch::Device device =
      device_flag == "cuda" ? torch::Device(torch::kCUDA, env.local_rank) : torch::Device(torch::kCPU);
  const std::string checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  absl::StatusOr<std::vector<std::string>> prompts = Prompts();
  if (!prompts.ok()) return Fail(rank, prompts.status().message());
  const int batch = std::max(1, std::min(absl::GetFlag(FLAGS_batch_size), static_cast<int>(prompts->size())));
  const std::string model_flag = absl::GetFlag(FLAGS_model);
  magi::models::LlamaConfig config = magi::models::LlamaConfig::Tiny();
  if (model_flag == "small") {
    config = magi::models::LlamaConfig::Small();
  } else if (model_flag == "1b") {
    // examples:train's 1b checkpoints have a 32000-token vocabulary; this one is bytes.
    if (!checkpoint_dir.empty()) return Fail(rank, "--model=1b runs random weights only: pass --checkpoint_dir=");
    config = magi::models::LlamaConfig::Llama1B();
  } else if (model_flag != "tiny") {
    return Fail(rank, absl::StrCat("unknown --model=", model_flag, " (tiny, small or 1b)"));
  }
  config.vocab_size = 256;
  if (absl::GetFlag(FLAGS_kv_heads) != 0) {
    if (!checkpoint_dir.empty()) return Fail(rank, "--kv_heads is for random weights: pass --checkpoint_dir=");
    config.n_kv_heads = absl::GetFlag(FLAGS_kv_heads);
  }
  const int seq = absl::GetFlag(FLAGS_seq_len);
  config.max_seq_len = std::max<int64_t>(config.max_seq_len, seq);
  if (absl::Status valid = config.Validate(); !valid.ok()) return Fail(rank, valid.message());
  auto timeout = std::chrono::seconds(120);
  auto store = magi::ConnectStore(env, timeout);
  if (!store.ok()) return Fail(rank, store.status().message());
  magi::CommunicatorOptions communicator_options;
  communicator_options.store = *store;
  communicator_options.rank = rank;
  communicator_options.size = env.world_size;
  communicator_options.timeout = timeout;
  communicator_options.deterministic = deterministic;
  communicator_options.group_name = "dp";
  communicator_options.device_index = env.local_rank;
  absl::StatusOr<std::string> communicator_name = magi::DefaultCommunicatorFor(device_flag);
  if (!communicator_name.ok()) return Fail(rank, communicator_name.status().message());
  auto communicator = magi::CreateCommunicator(*communicator_name, communicator_options);
  if (!communicator.ok()) return Fail(rank, communicator.status().message());
  auto mesh = magi::DeviceMesh::Create({env.world_size}, {"dp"}, rank);
  if (!mesh.ok()) return Fail(rank, mesh.status().message());
  torch::manual_seed(absl::GetFlag(FLAGS_init_seed));
  magi::models::Llama model(config, torch::TensorOptions().device(device).dtype(
                                        dtype_flag == "bf16" ? torch::kBFloat16 : torch::kFloat));
  for (auto& layer : model->layers) magi::FullyShard(*layer, *mesh);
  magi::FullyShard(*model, *mesh);
  model->eval();
  if (rank == 0 && !absl::GetFlag(FLAGS_dump_weights).empty()) {
    std::vector<std::pair<std::string, at::Tensor>> weights;
    for (const auto& item : model->named_parameters()) weights.emplace_back(item.key(), item.value().to(torch::kFloat));
    absl::Status written = magi::WriteTensorFile(absl::GetFlag(FLAGS_dump_weights), weights);
    if (!written.ok()) return Fail(rank, written.message());
    std::fprintf(stderr, "magi: wrote the weights to %s\n", absl::GetFlag(FLAGS_dump_weights).c_str());
  }

  magi::GenerationOptions options;
  options.window = seq;
  options.overflow_keep = absl::GetFlag(FLAGS_overflow_keep);
  options.batch = batch;
  options.kv_cache = absl::GetFlag(FLAGS_kv_cache);
  options.decode_math_attention = absl::GetFlag(FLAGS_decode_attention) == "math";
  options.record_logits = !absl::GetFlag(FLAGS_logits_out).empty();  // read with the tokens, once per --tokens_per_read
  options.tokens_per_read = absl::GetFlag(FLAGS_tokens_per_read);
  options.sampling.temperature = absl::GetFlag(FLAGS_temperature);
  options.sampling.top_k = absl::GetFlag(FLAGS_top_k);
  options.sampling.seed = absl::GetFlag(FLAGS_seed);
  options.inference.compile = magi::CompileOptionsFromFlags(device_flag);
  options.inference.calibration = magi::CalibrationFromFlags();
  for (absl::string_view bucket : absl::StrSplit(absl::GetFlag(FLAGS_prefill_buckets), ',', absl::SkipEmpty())) {
    int64_t length = 0;
    if (!absl::SimpleAtoi(bucket, &length)) {
      return Fail(rank, absl::StrCat("--prefill_buckets: '", bucket, "' is not a length"));
    }
    options.prefill_buckets.push_back(length);
  }
  options.invariant_batch = absl::GetFlag(FLAGS_invariant_batch);
  options.unrolled_prefill = absl::GetFlag(FLAGS_unrolled_prefill);
  if (options.invariant_batch == -1) {
    // The GPU's decode step is weight-bound: batched rows are its speed (docs/deterministic.md).
    options.invariant_batch = deterministic && options.kv_cache && device.is_cuda() ? kDefaultInvariantBatch : 0;
  }
  auto compile_start = std::chrono::steady_clock::now();
  auto generator = magi::TextGenerator::Create(*model, *communicator, options);
  if (!generator.ok()) return Fail(rank, generator.status().message());
  if (!checkpoint_dir.empty()) {
    absl::Status loaded = (*generator)->LoadShardsFromCheckpoint(checkpoint_dir);
    if (!loaded.ok()) return Fail(rank, loaded.message());
  }
  const double compile_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - compile_start).count();
  // The prefill buckets the prompts need are compiled here, before the clock starts.
  std::vector<int64_t> prompt_lengths;
  for (const std::string& prompt : *prompts) {
    const int64_t length = static_cast<int64_t>(prompt.size());
    prompt_lengths.push_back(length <= seq ? length : (options.overflow_keep > 0 ? options.overflow_keep : seq / 2));
  }
  absl::Status warm = (*generator)->Warmup(absl::GetFlag(FLAGS_warmup_forwards), prompt_lengths);
  if (!warm.ok()) return Fail(rank, warm.message());
  if (device.is_cuda()) torch::cuda::synchronize();
  if (rank == 0) std::fprintf(stderr, "magi: compiled the graphs in %.1f s\n", compile_seconds);
#ifdef MAGI_WITH_CUDA
  // The peak of the generation (CUDA graphs hold their memory from their capture in the
  // warm-up on): what torch.cuda.max_memory_allocated reports for PyTorch runs reset the same way.
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#endif
  const magi::TextGenerator& gen = **generator;
  if (rank == 0 && !absl::GetFlag(FLAGS_dump_graphs).empty()) {
    const std::string dir = absl::GetFlag(FLAGS_dump_graphs);
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (error) return Fail(rank, absl::StrCat("cannot create ", dir, ": ", error.message()));
    std::vector<std::pair<std::string, const magi::FsdpInference*>> graphs = {{"decode", gen.decode()},
                                                                              {"forward", gen.forward()}};
    for (const auto& [bucket, prefill] : gen.prefills()) graphs.emplace_back(absl::StrCat("prefill.", bucket), prefill.get());
    for (const auto& [name, graph] : graphs) {
      if (graph == nullptr) continue;
      absl::Status dumped =
          magi::WriteFileAtomically(absl::StrCat(dir, "/", name, ".mir"), magi::PrintModule(graph->module()));
      if (!dumped.ok()) return Fail(rank, dumped.message());
    }
  }
  if (rank == 0) {
    if (deterministic) {
      if (options.kv_cache) {
        std::string plans;
        for (const auto& [bucket, prefill] : gen.prefills()) {
          absl::StrAppend(&plans, prefill->plan_hash(), " (prefill ", bucket, "), ");
        }
        std::fprintf(stderr, "magi: plan %s%s (decode)\n", plans.c_str(), gen.decode()->plan_hash().c_str());
      } else {
        std::fprintf(stderr, "magi: plan %s\n", gen.forward()->plan_hash().c_str());
      }
    }
    if (options.kv_cache) {
      absl::StatusOr<magi::MemoryPlan> donated = gen.decode()->PlannedMemory(/*donated=*/true);
      absl::StatusOr<magi::MemoryPlan> copied = gen.decode()->PlannedMemory(/*donated=*/false);
      if (!donated.ok()) return Fail(rank, donated.status().message());
      if (!copied.ok()) return Fail(rank, copied.status().message());
      std::fprintf(stderr,
                   "magi: KV cache %lld bytes per rank (%lld layers x K,V [%d, %lld, %d, %lld]); decode step planned "
                   "peak %lld bytes with the cache donated (updated in place), %lld without (%lld more)\n",
                   static_cast<long long>(gen.cache_bytes()), static_cast<long long>(config.n_layers), batch,
                   static_cast<long long>(config.kv_heads()), seq, static_cast<long long>(config.head_dim()),
                   static_cast<long long>(donated->peak_bytes), static_cast<long long>(copied->peak_bytes),
                   static_cast<long long>(copied->peak_bytes - donated->peak_bytes));
    }
  }

  const int length = absl::GetFlag(FLAGS_length);
  const bool stream = prompts->size() == 1;  // one prompt: print bytes as they come
  if (rank == 0 && stream) std::fputs((*prompts)[0].c_str(), stdout);
  const double progress_s = absl::GetFlag(FLAGS_progress_s);
  const int64_t total = static_cast<int64_t>(prompts->size()) * length;
  int64_t done = 0;
  // Started before the clock: Kineto's start-up is not generation time.
  std::unique_ptr<magi::compat::KernelTrace> kernel_trace;
  if (!absl::GetFlag(FLAGS_kernel_trace).empty() && rank == 0) {
    absl::StatusOr<std::unique_ptr<magi::compat::KernelTrace>> started = magi::compat::KernelTrace::Start(device.is_cuda());
    if (!started.ok()) return Fail(rank, started.status().message());
    kernel_trace = *std::move(started);
  }
  auto start = std::chrono::steady_clock::now();
  auto last_progress = start;
  auto on_byte = [&](size_t, char byte) {
    ++done;
    if (rank != 0) return;
    if (stream) {
      std::fputc(static_cast<unsigned char>(byte), stdout);
      std::fflush(stdout);
    }
    auto now = std::chrono::steady_clock::now();
    if (progress_s > 0 && std::chrono::duration<double>(now - last_progress).count() >= progress_s && done < total) {
      last_progress = now;
      double elapsed = std::chrono::duration<double>(now - start).count();
      // On a terminal the streamed text has no newline yet: end its line first.
      std::fprintf(stderr, "%smagi: progress %lld/%lld bytes (%.0f%%), %.1f bytes/s, about %.0f s left\n",
                   stream && isatty(fileno(stderr)) ? "\n" : "", static_cast<long long>(done), static_cast<long long>(total),
                   100.0 * done / total, done / elapsed, (total - done) / (done / elapsed));
    }
  };
  absl::StatusOr<magi::Generated> generated = (*generator)->Generate(*prompts, length, on_byte);
  if (!generated.ok()) return Fail(rank, generated.status().message());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (kernel_trace != nullptr) {
    absl::Status written = kernel_trace->StopAndSave(absl::GetFlag(FLAGS_kernel_trace));
    if (!written.ok()) return Fail(rank, written.message());
    std::fprintf(stderr, "wrote the Kineto trace of the generation to %s\n", absl::GetFlag(FLAGS_kernel_trace).c_str());
  }
  if (const std::string path = absl::GetFlag(FLAGS_megakernel_timeline); !path.empty() && rank == 0) {
    int written = 0;
    for (const auto& [callee, executable] : gen.decode()->partition_executables()) {
      if (executable->backend_name() != "megakernel") continue;
      absl::StatusOr<std::string> summary = magi::megakernel::WriteLastStepTimeline(*executable, path);
      if (!summary.ok()) {
        std::fprintf(stderr, "magi: warning: --megakernel_timeline: %s\n",
                     std::string(summary.status().message()).c_str());
        continue;
      }
      std::fprintf(stderr, "magi: the last decode step's timeline (@%s) is in %s:\n%s", callee.c_str(), path.c_str(),
                   summary->c_str());
      ++written;
    }
    // A diagnostic: its absence is reported, and the generation's results stand.
    if (written == 0) {
      std::fprintf(stderr, "magi: warning: --megakernel_timeline: no timeline written (the decode step calls no "
                           "megakernel partition that ran on CUDA; the compile notes say why)\n");
    }
  }
  if (rank == 0) {
    if (stream) {
      std::fputc('\n', stdout);
    } else {
      for (const std::string& text : generated->texts) std::printf("%s\n----\n", text.c_str());
    }
#ifdef MAGI_WITH_CUDA
    if (device.is_cuda()) {
      auto memory = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
      std::fprintf(stderr, "magi: peak device memory %lld bytes\n",
                   static_cast<long long>(memory.allocated_bytes[0].peak));
    }
#endif
    const magi::GenerationStats& stats = gen.stats();
    std::fprintf(stderr,
                 "magi: generated %zu x %d bytes in %.2f s (%.1f bytes/s; %lld forwards of %d sequences%s%s)\n",
                 prompts->size(), length, seconds, PerSecond(static_cast<double>(total), seconds),
                 static_cast<long long>(stats.prefill_runs + stats.decode_runs), batch,
                 options.kv_cache ? ", KV cache" : ", full recompute",
                 !deterministic                 ? ""
                 : options.invariant_batch > 0 ? absl::StrCat(", batch-invariant: ", options.invariant_batch, " rows, ",
                                                               options.unrolled_prefill ? "prefill unrolled, " : "",
                                                               "batched").c_str()
                                               : ", batch-invariant: unrolled");
    if (options.kv_cache) {
      std::fprintf(stderr,
                   "magi: prefill: %lld runs, %lld sequences (%lld after a context overflow), %lld context bytes "
                   "(%lld bucket positions) in %.3f s: %.1f bytes/s (%.1f positions/s)\n",
                   static_cast<long long>(stats.prefill_runs), static_cast<long long>(stats.prefill_sequences),
                   static_cast<long long>(stats.reprefills), static_cast<long long>(stats.prefill_bytes),
                   static_cast<long long>(stats.prefill_positions), stats.prefill_seconds,
                   PerSecond(static_cast<double>(stats.prefill_bytes), stats.prefill_seconds),
                   PerSecond(static_cast<double>(stats.prefill_positions), stats.prefill_seconds));
      std::fprintf(stderr, "magi: decode: %lld steps of %d sequences, %lld bytes in %.3f s: %.1f bytes/s\n",
                   static_cast<long long>(stats.decode_runs), batch, static_cast<long long>(stats.decode_bytes),
                   stats.decode_seconds, PerSecond(static_cast<double>(stats.decode_bytes), stats.decode_seconds));
    } else {
      std::fprintf(stderr,
                   "magi: full recompute: %lld forwards of %d x %d positions, %lld bytes in %.3f s: %.1f bytes/s\n",
                   static_cast<long long>(stats.decode_runs), batch, seq, static_cast<long long>(stats.decode_bytes),
                   stats.decode_seconds, PerSecond(static_cast<double>(stats.decode_bytes), stats.decode_seconds));
    }
    if (!absl::GetFlag(FLAGS_logits_out).empty()) {
      std::vector<std::pair<std::string, at::Tensor>> dump;
      for (size_t p = 0; p < generated->texts.size(); ++p) {
        dump.emplace_back(absl::StrCat("prompt.", p, ".logits"), generated->logits[p]);
        std::vector<int64_t> bytes;
        for (size_t j = (*prompts)[p].size(); j < generated->texts[p].size(); ++j) {
          bytes.push_back(static_cast<unsigned char>(generated->texts[p][j]));
        }
        dump.emplace_back(absl::StrCat("prompt.", p, ".tokens"), torch::tensor(bytes, torch::kLong));
      }
      absl::Status written = magi::WriteTensorFile(absl::GetFlag(FLAGS_logits_out), dump);
      if (!written.ok()) return Fail(rank, written.message());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  magi::ParseExampleFlags(argc, argv,
                          "Continues a prompt with the model examples:train checkpointed (greedy or sampled, with a KV "
                          "cache).\n  tools/bazel run //examples:generate -- --checkpoint_dir=DIR [--prompt=TEXT] "
                          "[--length=N] ...",
                          "examples/generate.cc");
  if (absl::Status valid = ValidateFlags(); !valid.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(valid.message()).c_str());
    return 1;
  }
  if (std::optional<int> code = magi::RunLocalWorkersIfLauncher(absl::GetFlag(FLAGS_world_size), argc, argv)) {
    return *code;
  }
  absl::StatusOr<magi::DistributedEnv> env = magi::DistributedEnvFromEnvironment();
  if (!env.ok()) return Fail(0, env.status().message());
  return Generate(*env);
}
