#include "magi/calibration/cpu_step_runs.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "magi/analysis/memory_plan.h"
#include "magi/backend/interpreter/interpreter.h"
#include "magi/backend/torch_executable.h"
#include "magi/base/fnv1a.h"
#include "magi/base/host_memory.h"
#include "magi/base/status_macros.h"
#include "magi/calibration/input_synthesis.h"
#include "magi/compat/torch_status.h"
#include "magi/ir/collectives.h"
#include "magi/ir/magi_ops.h"

namespace magi::calibration {

absl::StatusOr<int> StepRunTimer::TimeKernelsInStepRuns(const std::vector<KernelRequest>& requests,
                                                        const std::vector<bool>& measure,
                                                        Clock::time_point calibration_start,
                                                        std::vector<std::optional<Timing>>& timings,
                                                        std::vector<bool>& in_order) {
  // The graphs with something to measure, in request order (the same on every rank).
  std::vector<const Graph*> graphs;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!measure[i] || requests[i].callee != nullptr) continue;
    const Graph* graph = requests[i].node->graph();
    if (std::find(graphs.begin(), graphs.end(), graph) == graphs.end()) graphs.push_back(graph);
  }
  int collectives = 0;
  for (const Graph* graph : graphs) {
    MAGI_ASSIGN_OR_RETURN(std::optional<CalibrationTable> runs, RunStep(*graph, calibration_start));
    if (!runs) continue;
    for (size_t i = 0; i < requests.size(); ++i) {
      if (!measure[i] || requests[i].callee != nullptr || requests[i].node->graph() != graph) continue;
      const bool collective = IsCollectiveStart(requests[i].node->op());
      if (collective && in_order[i]) continue;
      auto entry = runs->entries().find(CalibrationTable::KeyOf(*requests[i].node));
      if (entry == runs->entries().end()) continue;
      timings[i] = Timing{entry->second.mean_seconds, static_cast<int>(entry->second.count)};
      if (collective) {
        in_order[i] = true;
        ++collectives;
      }
    }
  }
  return collectives;
}

absl::StatusOr<std::optional<CalibrationTable>> StepRunTimer::RunStep(const Graph& graph,
                                                                      Clock::time_point calibration_start) {
  std::string keys;
  for (const Node* node : graph.nodes()) absl::StrAppend(&keys, CalibrationTable::KeyOf(*node), "\n");
  const uint64_t fingerprint = Fnv1a64(keys);
  if (auto known = step_runs_.find(fingerprint); known != step_runs_.end()) return known->second;
  std::unique_ptr<Executable> compiled;
  std::vector<at::Tensor> inputs;
  const std::string why = PrepareStepRun(graph, calibration_start, compiled, inputs);
  MAGI_ASSIGN_OR_RETURN(std::vector<std::vector<double>> can, exchange_.Exchange({why.empty() ? 1.0 : 0.0}));
  bool everyone = true;
  for (const std::vector<double>& rank : can) everyone = everyone && rank.at(0) == 1.0;
  if (!everyone) {
    PrintProgress(options_.progress,
                  absl::StrCat("magi: graph @", graph.name(), ": its kernels keep their micro-run times (",
                               why.empty() ? "another rank cannot run it" : why, ")"),
                  /*line=*/true);
    step_runs_[fingerprint] = std::nullopt;
    return std::nullopt;
  }
  auto* executable = static_cast<TorchExecutable*>(compiled.get());
  executable->set_profile_nodes(true);
  // As the trainers run a step: donating its inputs (magi::adamw and in-place ops write
  // over them). The synthesized tensors are this calibrator's own.
  auto run_once = [&](int run) -> absl::Status {
    absl::StatusOr<std::vector<at::Tensor>> outputs =
        compat::CallTorch("", [&] { return executable->RunDonating(inputs); });
    if (!outputs.ok()) {
      return absl::Status(outputs.status().code(),
                          absl::StrCat("calibration: run ", run + 1, " of graph @", graph.name(),
                                       " on synthesized inputs (to time its kernels where the step runs them) "
                                       "failed: ",
                                       outputs.status().message()));
    }
    return absl::OkStatus();
  };
  const int warmup = std::max(1, options_.step_warmup_runs);
  Clock::time_point last_start = Clock::now();
  for (int run = 0; run < warmup; ++run) {
    last_start = Clock::now();
    MAGI_RETURN_IF_ERROR(run_once(run));
  }
  // A step's time moves by tens of percent from run to run on shared cores: as many runs
  // as the budget allows at the slowest rank's pace, the same count on every rank (their
  // collectives pair up).
  MAGI_ASSIGN_OR_RETURN(std::vector<std::vector<double>> paces, exchange_.Exchange({SecondsSince(last_start)}));
  double pace = 1e-9;
  for (const std::vector<double>& rank : paces) pace = std::max(pace, rank.at(0));
  const int fewest = std::max(1, options_.min_step_runs);
  const int counted = static_cast<int>(std::clamp<double>(std::floor(options_.seconds_for_step_runs / pace), fewest,
                                                          std::max(fewest, options_.max_step_runs)));
  // Per key, as calibration from real steps records them (a collective: start + wait).
  RunTimeAccumulator accumulator(graph);
  for (int run = 0; run < counted; ++run) {
    MAGI_RETURN_IF_ERROR(run_once(warmup + run));
    MAGI_RETURN_IF_ERROR(accumulator.Add(executable->last_run_stats().node_seconds));
  }
  CalibrationTable times;
  accumulator.AddTo(times);
  step_runs_[fingerprint] = times;
  return times;
}

std::string StepRunTimer::PrepareStepRun(const Graph& graph, Clock::time_point calibration_start,
                                         std::unique_ptr<Executable>& compiled, std::vector<at::Tensor>& inputs) {
  if (SecondsSince(calibration_start) > options_.max_seconds) return "past the calibration's time limit";
  if (graph.module() == nullptr || graph.nodes().empty()) return "no module or no nodes";
  for (const Node* node : graph.nodes()) {
    if (node->op() == kCallOp) return "it calls compiled partitions";
    if (log_.FailedToRun(*node)) return absl::StrCat(node->op(), " cannot run on synthesized inputs");
  }
  if (std::string why = ExceedsStepRunMemory(graph); !why.empty()) return why;
  absl::StatusOr<const NodePlan*> planned = plans_.PlanOf(*graph.nodes().front());
  if (!planned.ok()) return std::string(planned.status().message());
  const StepPlan& step = plans_.StepOf(graph);
  for (const std::string& group : step.groups) {
    auto it = options_.communicators.find(group);
    if (it == options_.communicators.end() || it->second == nullptr) {
      return absl::StrCat("no communicator for group '", group, "'");
    }
  }
  InterpreterBackend backend;
  absl::StatusOr<std::unique_ptr<Executable>> made = backend.Compile(*graph.module(), graph);
  if (!made.ok()) return std::string(made.status().message());
  auto* executable = dynamic_cast<TorchExecutable*>(made->get());
  if (executable == nullptr) return "the interpreter did not make a TorchExecutable";
  for (const std::string& group : step.groups) {
    if (absl::Status bound = executable->BindCommunicator(group, options_.communicators.at(group)); !bound.ok()) {
      return std::string(bound.message());
    }
  }
  absl::StatusOr<std::vector<at::Tensor>> synthesized = SynthesizeGraphInputs(graph);
  if (!synthesized.ok()) return std::string(synthesized.status().message());
  inputs = *std::move(synthesized);
  compiled = *std::move(made);
  return "";
}

std::string StepRunTimer::ExceedsStepRunMemory(const Graph& graph) const {
  absl::StatusOr<MemoryPlan> memory = PlanMemory(graph, /*assign_buffers=*/false);
  if (!memory.ok()) return absl::StrCat("its memory plan failed: ", memory.status().message());
  int64_t limit = options_.max_step_run_bytes;
  std::string what = "max_step_run_bytes";
  if (limit < 0) {
    std::optional<int64_t> available = AvailableHostMemoryBytes();
    if (!available) return "";  // nothing to compare with (neither /proc/meminfo nor a cgroup limit)
    int ranks = 1;
    for (const auto& [group, communicator] : options_.communicators) {
      if (communicator != nullptr) ranks = std::max(ranks, communicator->size());
    }
    limit = *available / 2 / ranks;
    what = absl::StrFormat("half of the %.1f MB available to this process over %d ranks", *available / 1e6, ranks);
  }
  if (memory->peak_bytes <= limit) return "";
  return absl::StrFormat("a run would hold %.1f MB at its peak, above %.1f MB (%s)", memory->peak_bytes / 1e6,
                         limit / 1e6, what);
}

}  // namespace magi::calibration
