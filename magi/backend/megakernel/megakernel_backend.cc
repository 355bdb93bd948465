#include "magi/backend/megakernel/megakernel_backend.h"

#include <chrono>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "magi/backend/megakernel/device_program.h"
#include "magi/backend/megakernel/program_check.h"
#include "magi/backend/megakernel/program_timeline.h"
#include "magi/backend/megakernel/reference_executor.h"
#include "magi/backend/torch_executable.h"
#include "magi/base/status_macros.h"
#include "magi/ir/graph_utils.h"

#ifdef MAGI_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>

#include "magi/backend/megakernel/kernel_runner.h"
#endif

namespace magi::megakernel {
namespace {

constexpr int kCpuSms = 132;  // an H100 SXM's, so that the CPU runs the program a GPU would

bool OnCuda(const DecodeGraphMatch& match) {
  return match.tokens->type().tensor().device.type == DeviceType::kCuda;
}

// What each graph output is.
struct OutputSource {
  enum Kind { kLogits, kNextToken, kCache } kind = kLogits;
  int input = -1;  // kCache: the graph input it aliases
};

absl::StatusOr<std::vector<OutputSource>> OutputSources(const Graph& graph, const DecodeGraphMatch& match) {
  std::vector<const Value*> caches;
  for (const DecodeLayerBinding& layer : match.layers) {
    caches.push_back(layer.key_cache);
    caches.push_back(layer.value_cache);
  }
  std::vector<OutputSource> sources;
  for (const GraphOutput& output : graph.outputs()) {
    OutputSource source;
    if (output.value == match.logits) {
      source.kind = OutputSource::kLogits;
    } else if (output.value == match.next_token) {
      source.kind = OutputSource::kNextToken;
    } else if (output.aliases != nullptr && std::find(caches.begin(), caches.end(), output.aliases) != caches.end()) {
      source.kind = OutputSource::kCache;
      const auto inputs = graph.inputs();
      source.input = static_cast<int>(std::find(inputs.begin(), inputs.end(), output.aliases) - inputs.begin());
    } else {
      return absl::UnimplementedError(absl::StrCat("output '", output.name, "' (%", output.value->name(),
                                                   ") is none of the logits, the next tokens and the updated caches"));
    }
    sources.push_back(source);
  }
  return sources;
}

// InvalidArgument unless every value of the int64 CPU tensor `values` is in [0, end).
absl::Status CheckInRange(const at::Tensor& values, int64_t end, absl::string_view what) {
  if (values.numel() == 0) return absl::OkStatus();
  const int64_t low = values.min().item<int64_t>(), high = values.max().item<int64_t>();
  if (low < 0 || high >= end) {
    return absl::InvalidArgumentError(
        absl::StrCat("a ", what, " outside [0, ", end, "): the step's ", what, "s span [", low, ", ", high, "]"));
  }
  return absl::OkStatus();
}

// The kernel's element types: bf16 weights, rope tables and caches.
absl::Status CheckKernelDTypes(const DecodeGraphMatch& match) {
  std::vector<std::pair<const Value*, const char*>> values = {
      {match.rope_cos, "rope cosines"}, {match.rope_sin, "rope sines"}, {match.embedding, "embedding"},
      {match.final_norm, "final norm"}, {match.lm_head, "LM head"}};
  for (const DecodeLayerBinding& l : match.layers) {
    values.insert(values.end(), {{l.attention_norm, "attention norm"},
                                 {l.qkv_weight, "q/k/v weight"},
                                 {l.o_weight, "output projection"},
                                 {l.ffn_norm, "FFN norm"},
                                 {l.gate_up_weight, "gate/up weight"},
                                 {l.down_weight, "down projection"},
                                 {l.key_cache, "key cache"},
                                 {l.value_cache, "value cache"}});
  }
  for (const auto& [value, what] : values) {
    if (value->type().tensor().dtype != DType::kBFloat16) {
      return absl::UnimplementedError(absl::StrCat("the CUDA kernel takes bf16; the ", what, " %", value->name(),
                                                   " is ", value->type().tensor().ToString()));
    }
  }
  return absl::OkStatus();
}

class MegakernelExecutable : public TorchExecutable {
 public:
  static absl::StatusOr<std::unique_ptr<MegakernelExecutable>> Create(const Graph& graph, Program program,
                                                                      const MegakernelOptions& options) {
    auto exe = std::unique_ptr<MegakernelExecutable>(new MegakernelExecutable());
    exe->graph_ = CloneGraph(graph, graph.name());
    MAGI_ASSIGN_OR_RETURN(exe->match_, MatchDecodeGraph(*exe->graph_));
    MAGI_ASSIGN_OR_RETURN(exe->outputs_, OutputSources(*exe->graph_, exe->match_));
    exe->program_ = std::move(program);
    exe->options_ = options;
    exe->logits_dtype_ = exe->match_.logits->type().tensor().dtype;
    return exe;
  }

  absl::string_view backend_name() const override { return "megakernel"; }

  absl::StatusOr<std::string> WriteLastStepTimeline(const std::string& path, double peak_bytes_per_s) const {
#ifdef MAGI_WITH_CUDA
    if (runner_ != nullptr && runner_->steps_run() > 0) {
      MAGI_ASSIGN_OR_RETURN(std::vector<InstructionTimes> times, runner_->LastStepTimeline());
      MAGI_RETURN_IF_ERROR(WriteTimelineTrace(program_, times, path));
      return SummarizeTimeline(program_, times, peak_bytes_per_s);
    }
#else
    (void)path;
    (void)peak_bytes_per_s;
#endif
    return absl::FailedPreconditionError(
        "the megakernel executable has run no step on CUDA: only the kernel records a timeline");
  }
  const RunStats& last_run_stats() const override { return stats_; }
  void set_profile_nodes(bool) override {}
  absl::Status BindCommunicator(const std::string& group, std::shared_ptr<Communicator>) override {
    return absl::FailedPreconditionError(absl::StrCat("the megakernel backend runs no collectives (group ", group, ")"));
  }

  absl::StatusOr<std::vector<at::Tensor>> Run(const std::vector<at::Tensor>& inputs) override {
    const auto start = std::chrono::steady_clock::now();
    MAGI_ASSIGN_OR_RETURN(DecodeTensors tensors, BindDecodeTensors(match_, *graph_, inputs));
    at::Tensor logits, next_token;
    int64_t allocated = -1;
    if (tensors.tokens.device().is_cpu()) {
      // The graph's index_put and embedding would refuse these; the kernel clamps them.
      MAGI_RETURN_IF_ERROR(CheckInRange(tensors.tokens, program_.model.vocab, "token"));
      MAGI_RETURN_IF_ERROR(CheckInRange(tensors.positions, program_.model.window, "position"));
      MAGI_ASSIGN_OR_RETURN(ReferenceResult result, RunReference(program_, tensors));
      logits = std::move(result.logits);
      next_token = std::move(result.next_token);
    } else {
      MAGI_RETURN_IF_ERROR(RunOnDevice(tensors, logits, next_token));
      allocated = logits.nbytes() + next_token.nbytes();
    }
    std::vector<at::Tensor> outputs;
    for (const OutputSource& source : outputs_) {
      switch (source.kind) {
        case OutputSource::kLogits:
          outputs.push_back(logits);
          break;
        case OutputSource::kNextToken:
          outputs.push_back(next_token);
          break;
        case OutputSource::kCache:
          outputs.push_back(inputs[source.input]);  // written in place
          break;
      }
    }
    stats_ = RunStats();
    stats_.nodes_run = graph_->num_nodes();
    stats_.peak_allocated_bytes = allocated;
    stats_.seconds = stats_.host_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return outputs;
  }

 private:
  MegakernelExecutable() = default;

  absl::Status RunOnDevice(const DecodeTensors& tensors, at::Tensor& logits, at::Tensor& next_token) {
#ifdef MAGI_WITH_CUDA
    if (runner_ == nullptr) {
      DecodeKernelOptions kernel;
      kernel.stage_inputs = options_.stage_inputs;
      kernel.stream_weights = options_.stream_weights;
      kernel.tensor_cores = options_.tensor_cores;
      MAGI_ASSIGN_OR_RETURN(runner_, DecodeKernelRunner::Create(program_, tensors.tokens.device(), kernel));
    }
    MAGI_RETURN_IF_ERROR(runner_->Step(tensors));
    const DecodeModel& m = program_.model;
    logits = runner_->logits().view({m.batch, 1, m.vocab}).to(logits_dtype_ == DType::kBFloat16 ? at::kBFloat16
                                                                                                   : at::kFloat);
    next_token = runner_->next_token().clone();
    return absl::OkStatus();
#else
    (void)logits;
    (void)next_token;
    return absl::FailedPreconditionError(absl::StrCat("the megakernel backend runs on ", tensors.tokens.device().str(),
                                                      " only in a --config=cuda build"));
#endif
  }

  std::unique_ptr<Graph> graph_;
  DecodeGraphMatch match_;  // of graph_
  std::vector<OutputSource> outputs_;
  Program program_;
  DType logits_dtype_ = DType::kFloat32;
  MegakernelOptions options_;
  RunStats stats_;
#ifdef MAGI_WITH_CUDA
  std::unique_ptr<DecodeKernelRunner> runner_;
#endif
};

}  // namespace

absl::StatusOr<std::string> WriteLastStepTimeline(const Executable& executable, const std::string& path,
                                                  double peak_bytes_per_s) {
  const auto* mega = dynamic_cast<const MegakernelExecutable*>(&executable);
  if (mega == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("a timeline needs a megakernel executable, not one of '", executable.backend_name(), "'"));
  }
  return mega->WriteLastStepTimeline(path, peak_bytes_per_s);
}

bool HasCudaKernel() {
#ifdef MAGI_WITH_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<MegakernelOptions> MegakernelOptions::Parse(const ComponentOptions& options) {
  MegakernelOptions parsed;
  for (const auto& [key, value] : options) {
    int64_t number = 0;
    bool* flag = key == "check"            ? &parsed.check
                 : key == "stage_inputs"   ? &parsed.stage_inputs
                 : key == "stream_weights" ? &parsed.stream_weights
                 : key == "tensor_cores"   ? &parsed.tensor_cores
                                           : nullptr;
    if (flag != nullptr) {
      if (value != "true" && value != "false") {
        return absl::InvalidArgumentError(absl::StrCat("megakernel: ", key, "=", value, " is not true or false"));
      }
      *flag = value == "true";
      continue;
    }
    if (key != "num_sms" && key != "tile_rows" && key != "attention_splits") {
      return absl::InvalidArgumentError(absl::StrCat("megakernel: unknown option '", key,
                                                     "' (options: num_sms, tile_rows, attention_splits, check, stage_inputs, stream_weights, tensor_cores)"));
    }
    if (!absl::SimpleAtoi(value, &number) || number < 0 || number > (1 << 20)) {
      return absl::InvalidArgumentError(
          absl::StrCat("megakernel: ", key, "=", value, " is not a non-negative integer"));
    }
    if (key == "num_sms") parsed.num_sms = static_cast<int>(number);
    if (key == "tile_rows") parsed.tile_rows = number;
    if (key == "attention_splits") parsed.attention_splits = static_cast<int>(number);
  }
  if (parsed.tensor_cores && !parsed.stage_inputs) {
    return absl::InvalidArgumentError("megakernel: tensor_cores=true takes staged inputs (not stage_inputs=false)");
  }
  return parsed;
}

absl::StatusOr<ProgramOptions> MegakernelBackend::ProgramOptionsFor(bool cuda) const {
  ProgramOptions options;
  options.num_sms = options_.num_sms > 0 ? options_.num_sms : kCpuSms;
#ifdef MAGI_WITH_CUDA
  if (cuda && options_.num_sms == 0) {
    options.num_sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  }
#endif
  options.tile_rows = options_.tile_rows;
  options.attention_splits = options_.attention_splits;
  options.max_tile_rows = kMaxTileRows;  // the kernel's; the CPU runs the same program
  return options;
}

absl::StatusOr<DecodeGraphMatch> MegakernelBackend::Claim(const Graph& graph) const {
  MAGI_ASSIGN_OR_RETURN(DecodeGraphMatch match, MatchDecodeGraph(graph));
  MAGI_RETURN_IF_ERROR(OutputSources(graph, match).status());
  if (OnCuda(match)) {
    if (!HasCudaKernel()) {
      return absl::FailedPreconditionError("the graph is on CUDA and this build has no CUDA kernel (--config=cuda)");
    }
    MAGI_RETURN_IF_ERROR(CheckKernelDTypes(match));
    MAGI_ASSIGN_OR_RETURN(ProgramOptions options, ProgramOptionsFor(/*cuda=*/true));
    MAGI_ASSIGN_OR_RETURN(Program program, BuildProgram(match.model, options));
    MAGI_RETURN_IF_ERROR(PackProgram(program).status());
  }
  return match;
}

Capability MegakernelBackend::GetCapability(const Module&, const Graph& graph) const {
  Capability capability;
  absl::StatusOr<DecodeGraphMatch> match = Claim(graph);
  if (match.ok()) return capability;
  // Declined whole, each node with the one reason (the driver counts declines by reason).
  const std::string reason = absl::StrCat("not a decode step the MegaKernel runs: ", match.status().message());
  for (Node* node : graph.nodes()) capability.unsupported.emplace_back(node, reason);
  return capability;
}

bool MegakernelBackend::UpdatesDonatedInputInPlace(const Node& node) const {
  // MatchDecodeGraph accepts only the caches' index_put (without accumulation) at the positions.
  return node.op() == "aten::index_put";
}

absl::StatusOr<std::unique_ptr<Executable>> MegakernelBackend::Compile(const Module&, const Graph& graph,
                                                                       const CompileContext& context) const {
  if (!context.callees.empty()) return absl::InvalidArgumentError("the megakernel backend calls no partitions");
  // Deterministic needs nothing more: every sum runs in a fixed order (a warp per row, a
  // block per attention head group), with no atomics on data and no autotuning, and each
  // sequence's sums in the same order whatever the batch (batch-invariant).
  absl::StatusOr<DecodeGraphMatch> match = Claim(graph);
  if (!match.ok()) {
    return absl::Status(match.status().code(),
                        absl::StrCat("megakernel: @", graph.name(), ": ", match.status().message()));
  }
  MAGI_ASSIGN_OR_RETURN(ProgramOptions options, ProgramOptionsFor(OnCuda(*match)));
  MAGI_ASSIGN_OR_RETURN(Program program, BuildProgram(match->model, options));
  if (options_.check) MAGI_RETURN_IF_ERROR(CheckProgram(program));
  MAGI_ASSIGN_OR_RETURN(std::unique_ptr<MegakernelExecutable> exe,
                        MegakernelExecutable::Create(graph, std::move(program), options_));
  return std::unique_ptr<Executable>(std::move(exe));
}

MAGI_REGISTER(Backend, "megakernel", [](const ComponentOptions& options) -> absl::StatusOr<std::unique_ptr<Backend>> {
  MAGI_ASSIGN_OR_RETURN(MegakernelOptions parsed, MegakernelOptions::Parse(options));
  return std::make_unique<MegakernelBackend>(parsed);
});

}  // namespace magi::megakernel
