#include "examples/train_report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "magi/ir/collectives.h"

namespace magi::examples {

std::string Duration(double seconds) {
  int s = static_cast<int>(seconds + 0.5);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

std::string ProgressLine(const Progress& p) {
  return absl::StrFormat("step %d/%d | loss %.4f | %.0f tok/s | ETA %s%s", p.step, p.steps, p.loss, p.tokens_per_s,
                         Duration(p.eta_seconds), p.eager_note);
}

bool LogsProgress(int step, int first_step, int steps, bool every_step) {
  return (step + 1) % 10 == 0 || step == first_step || step + 1 == steps || every_step;
}

std::string LossCsv(const LossCurve& curve) {
  std::string csv = "step,loss\n";
  for (const auto& [step, loss] : curve) absl::StrAppendFormat(&csv, "%d,%.6f\n", step, loss);
  return csv;
}

std::string LossSvg(const LossCurve& points) {
  const double width = 640, height = 360, margin = 40;
  double max_loss = 0, min_loss = 1e30;
  for (const auto& [step, loss] : points) {
    max_loss = std::max(max_loss, loss);
    min_loss = std::min(min_loss, loss);
  }
  if (max_loss - min_loss < 1e-9) max_loss = min_loss + 1;
  int last = points.empty() ? 1 : std::max(1, points.back().first);
  std::string path;
  for (const auto& [step, loss] : points) {
    double x = margin + (width - 2 * margin) * step / last;
    double y = height - margin - (height - 2 * margin) * (loss - min_loss) / (max_loss - min_loss);
    absl::StrAppendFormat(&path, "%s%.1f,%.1f", path.empty() ? "M" : " L", x, y);
  }
  return absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%.0f\" y=\"20\" font-family=\"sans-serif\" font-size=\"14\">Magi FSDP training loss (%d "
      "steps)</text>\n"
      "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n"
      "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n"
      "<text x=\"4\" y=\"%.0f\" font-family=\"sans-serif\" font-size=\"11\">%.2f</text>\n"
      "<text x=\"4\" y=\"%.0f\" font-family=\"sans-serif\" font-size=\"11\">%.2f</text>\n"
      "<path d=\"%s\" fill=\"none\" stroke=\"#1565c0\" stroke-width=\"1.5\"/>\n</svg>\n",
      width, height, margin, last, margin, height - margin, width - margin, height - margin, margin, margin, margin,
      height - margin, margin + 4, max_loss, height - margin, min_loss, path);
}

std::string ResumeNote(int64_t saved_writers, int64_t saved_global_batch, int writers, int world, int local,
                       int first_step, int steps) {
  const int64_t global_batch = static_cast<int64_t>(world) * local;
  if (saved_writers == writers && (saved_global_batch == global_batch || saved_global_batch == 0)) return "";
  const std::string run =
      absl::StrFormat("%d rank%s x %d = %d samples per step", world, world == 1 ? "" : "s", local, global_batch);
  const std::string later = first_step + 1 >= steps ? absl::StrFormat("step %d", steps)
                                                    : absl::StrFormat("steps %d-%d", first_step + 1, steps);
  const std::string saved =
      absl::StrFormat("a checkpoint written by %d rank%s", saved_writers, saved_writers == 1 ? "" : "s");
  if (saved_global_batch == 0) {
    return absl::StrFormat("resumed %s that does not record its global batch; %s train with %s", saved, later, run);
  }
  if (saved_global_batch == global_batch) {
    return absl::StrFormat("resumed %s with %d samples per step on %s: the same global batch, the same samples in %s",
                           saved, saved_global_batch, run, later);
  }
  std::string note = absl::StrFormat(
      "resumed %s with %d samples per step on %s: the global batch changes from %d to %d; %s read samples 0-%d of "
      "each step's draw (the data stream is indexed by step: the first %d are the ones the saving run would have "
      "read, and no sample of steps 1-%d is read again)",
      saved, saved_global_batch, run, saved_global_batch, global_batch, later, global_batch - 1,
      std::min(saved_global_batch, global_batch), first_step);
  if (saved_global_batch % world == 0) {
    absl::StrAppendFormat(&note, "; --batch_size=%d keeps the global batch of %d", saved_global_batch / world,
                          saved_global_batch);
  }
  return note;
}

std::string SummaryJson(const Summary& s) {
  std::string step_seconds, losses;
  for (double seconds : s.timed_step_seconds) {
    absl::StrAppendFormat(&step_seconds, "%s%.6f", step_seconds.empty() ? "" : ", ", seconds);
  }
  for (double loss : s.losses) absl::StrAppendFormat(&losses, "%s%.8f", losses.empty() ? "" : ", ", loss);
  // JSON has no NaN or infinity: those are written as strings ("nan", "inf").
  const std::string eager = !s.check_eager ? std::string("null")
                            : std::isfinite(s.eager_max_relative_loss_difference)
                                ? absl::StrFormat("%.3e", s.eager_max_relative_loss_difference)
                                : absl::StrFormat("\"%f\"", s.eager_max_relative_loss_difference);
  return absl::StrFormat(
      "{\"initial_loss\": %.6f, \"final_loss\": %.6f, \"steps\": %d, \"world_size\": %d, \"tokens_per_s\": %.1f, "
      "\"peak_memory_bytes\": %d, \"predicted_peak_memory_bytes\": %d, \"step_seconds\": %.6f, "
      "\"predicted_step_seconds\": %.6f, \"memory_budget_bytes\": %d, \"pipeline\": \"%s\", \"backend\": \"%s\", "
      "\"model\": \"%s\", \"dtype\": \"%s\", \"tokens_per_step\": %d, \"timed_steps\": %d, "
      "\"host_seconds_per_step\": %.6f, \"allocator_peak_bytes\": %d, \"compile_seconds\": %.3f, "
      "\"partitions\": %d, \"deterministic\": %s, \"plan_hash\": \"%s\", \"calibration\": \"%s\", "
      "\"calibrated_kernels_measured\": %d, \"calibrated_kernels_cached\": %d, "
      "\"calibrated_kernels_from_steps\": %d, \"calibrated_kernels_pinned\": %d, \"calibration_table\": \"%s\", "
      "\"calibration_table_hash\": \"%s\", \"calibration_planned_hash\": \"%s\", \"timed_step_seconds\": [%s], %s, "
      "\"predicted_library_device_bytes\": %d, \"library_device_bytes\": %d, "
      "\"eager_max_relative_loss_difference\": %s, \"global_batch\": %d, \"resumed_from_step\": %d, "
      "\"resumed_world_size\": %d, \"resumed_global_batch\": %d, \"losses\": [%s]}\n",
      s.initial_loss, s.final_loss, s.steps, s.world_size, s.tokens_per_s, s.peak_memory_bytes,
      s.predicted_peak_memory_bytes, s.step_seconds, s.predicted_step_seconds, s.memory_budget_bytes, s.pipeline,
      s.backend, s.model, s.dtype, s.tokens_per_step, s.timed_steps, s.host_seconds_per_step, s.allocator_peak_bytes,
      s.compile_seconds, s.partitions, s.deterministic ? "true" : "false", s.plan_hash, s.calibration,
      s.calibrated_kernels_measured, s.calibrated_kernels_cached, s.calibrated_kernels_from_steps,
      s.calibrated_kernels_pinned, s.calibration_table, s.calibration_table_hash, s.calibration_planned_hash,
      step_seconds, s.energy_json, s.predicted_library_device_bytes, s.library_device_bytes, eager, s.global_batch,
      s.resumed_from_step, s.resumed_world_size, s.resumed_global_batch, losses);
}

std::string DescribeStepGraph(const Graph& graph) {
  int gathers = 0, scatters = 0;
  for (const Node* node : graph.nodes()) {
    gathers += node->op() == kAllGatherStartOp;
    scatters += node->op() == kReduceScatterStartOp;
  }
  return absl::StrFormat("one step graph of %d nodes (%d all-gathers, %d reduce-scatters)", graph.num_nodes(), gathers,
                         scatters);
}

std::string CalibrationNote(const std::string& calibration) {
  if (calibration == "none") return ", uncalibrated";
  if (calibration == "auto") return ", calibrated";
  return ", calibrated by " + calibration;
}

std::string CompileReport(const CompiledStep& step) {
  std::string report = absl::StrFormat("magi: %s, %.2f M parameters, %d ranks; %s, compiled in %.1f s\n", step.model,
                                       step.parameters / 1e6, step.world_size, step.step_graph, step.compile_seconds);
  if (!step.calibration_summary.empty()) absl::StrAppend(&report, "magi: ", step.calibration_summary, "\n");
  absl::StrAppendFormat(&report, "magi: pipeline %s; predicted step %.1f ms, peak %.2f MB per rank (%s profile%s)\n",
                        step.pipeline.empty() ? "(none)" : step.pipeline, step.predicted_step_seconds * 1e3,
                        step.predicted_peak_bytes / 1e6, step.device_profile, CalibrationNote(step.calibration));
  absl::StrAppendFormat(&report, "magi: plan %s: %s per step%s\n", step.plan_hash, step.collectives,
                        step.deterministic ? absl::StrFormat(" (the same on all %d ranks)", step.world_size) : "");
  return report;
}

std::string FinalReport(const Summary& s, double seconds, const std::string& out_dir, bool energy_measured) {
  std::string report = absl::StrFormat(
      "loss %.4f -> %.4f in %d steps (%.1f s, %.0f tok/s); wrote %s/{loss.csv,loss.svg,summary.json,checkpoint/}\n",
      s.initial_loss, s.final_loss, s.steps, seconds, s.tokens_per_s, out_dir);
  if (s.check_eager) {
    absl::StrAppendFormat(&report, "largest relative loss difference to eager: %.2e\n",
                          s.eager_max_relative_loss_difference);
  }
  if (energy_measured) absl::StrAppendFormat(&report, "GPU energy over the timed steps: {%s}\n", s.energy_json);
  return report;
}

std::string StepGraphReport(const Summary& s) {
  const int64_t library = s.library_device_bytes, library_predicted = s.predicted_library_device_bytes;
  return absl::StrFormat(
      "step graph: %.1f ms measured (predicted %.1f), peak %.3f MB measured (predicted %.3f%s%s)\n",
      s.step_seconds * 1e3, s.predicted_step_seconds * 1e3, s.peak_memory_bytes / 1e6,
      s.predicted_peak_memory_bytes / 1e6,
      library_predicted > 0 || library > 0
          ? absl::StrFormat("; PyTorch's GEMM workspaces hold %.3f more, predicted %.3f: %.3f", library / 1e6,
                            library_predicted / 1e6, (s.predicted_peak_memory_bytes + library_predicted) / 1e6)
          : "",
      s.memory_budget_bytes > 0 ? absl::StrFormat(", budget %.3f", s.memory_budget_bytes / 1e6) : "");
}

}  // namespace magi::examples
