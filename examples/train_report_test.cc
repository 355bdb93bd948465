// The strings examples:train prints and writes: their format is what train_test.sh, the
// docs' tables (tools/doc_tables.py reads summary.json) and users read.
#include "examples/train_report.h"

#include <cmath>
#include <limits>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace magi::examples {
namespace {

TEST(TrainReportTest, ProgressLine) {
  EXPECT_EQ(ProgressLine({3, 200, 4.51234, 12345.4, 42.4, ""}), "step 3/200 | loss 4.5123 | 12345 tok/s | ETA 0:42");
  EXPECT_EQ(ProgressLine({10, 10, 1, 1, 125, " | eager 1.0000 (rel diff 0.0e+00)"}),
            "step 10/10 | loss 1.0000 | 1 tok/s | ETA 2:05 | eager 1.0000 (rel diff 0.0e+00)");
}

TEST(TrainReportTest, LogsEveryTenthTheFirstAndTheLastStep) {
  EXPECT_TRUE(LogsProgress(0, 0, 200, false));
  EXPECT_FALSE(LogsProgress(1, 0, 200, false));
  EXPECT_TRUE(LogsProgress(9, 0, 200, false));
  EXPECT_TRUE(LogsProgress(199, 0, 200, false));
  EXPECT_TRUE(LogsProgress(4, 4, 200, false));  // the first step of a resumed run
  EXPECT_TRUE(LogsProgress(5, 0, 200, true));
}

TEST(TrainReportTest, LossCurveFiles) {
  EXPECT_EQ(LossCsv({{1, 5.5}, {2, 4.25}}), "step,loss\n1,5.500000\n2,4.250000\n");
  const std::string svg = LossSvg({{1, 5.5}, {2, 4.25}});
  EXPECT_TRUE(absl::StartsWith(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"360\">"));
  EXPECT_TRUE(absl::StrContains(svg, "Magi FSDP training loss (2 steps)"));
  EXPECT_TRUE(absl::StrContains(svg, "<path d=\"M320.0,40.0 L600.0,320.0\"")) << svg;
  EXPECT_TRUE(absl::StrContains(LossSvg({}), "<path d=\"\""));  // no points: an empty chart
}

TEST(TrainReportTest, ResumeNotes) {
  EXPECT_EQ(ResumeNote(2, 16, 2, 2, 8, 10, 20), "");  // nothing changed
  EXPECT_EQ(ResumeNote(2, 0, 2, 2, 8, 10, 20), "");   // not recorded, same writers
  EXPECT_EQ(ResumeNote(4, 16, 2, 2, 8, 10, 20),
            "resumed a checkpoint written by 4 ranks with 16 samples per step on 2 ranks x 8 = 16 samples per step: "
            "the same global batch, the same samples in steps 11-20");
  EXPECT_EQ(ResumeNote(1, 0, 2, 2, 8, 19, 20),
            "resumed a checkpoint written by 1 rank that does not record its global batch; step 20 train with 2 "
            "ranks x 8 = 16 samples per step");
  const std::string changed = ResumeNote(2, 16, 4, 4, 8, 10, 20);
  EXPECT_TRUE(absl::StrContains(changed, "the global batch changes from 16 to 32; steps 11-20 read samples 0-31"))
      << changed;
  EXPECT_TRUE(absl::EndsWith(changed, "; --batch_size=4 keeps the global batch of 16")) << changed;
}

TEST(TrainReportTest, CompileReport) {
  CompiledStep step;
  step.model = "llama(vocab=256, dim=64, layers=2, heads=4, ffn=176, seq=64)";
  step.parameters = 134400;
  step.world_size = 2;
  step.step_graph = "one step graph of 580 nodes (6 all-gathers, 3 reduce-scatters)";
  step.compile_seconds = 1.04;
  step.predicted_step_seconds = 0.01944;
  step.predicted_peak_bytes = 10150000;
  step.device_profile = "cpu";
  step.calibration = "none";
  step.plan_hash = "09bc51981c6317fe";
  step.collectives = "6 all-gathers (1.068 MB), 3 reduce-scatters (0.534 MB)";
  EXPECT_EQ(CompileReport(step),
            "magi: llama(vocab=256, dim=64, layers=2, heads=4, ffn=176, seq=64), 0.13 M parameters, 2 ranks; one step "
            "graph of 580 nodes (6 all-gathers, 3 reduce-scatters), compiled in 1.0 s\n"
            "magi: pipeline (none); predicted step 19.4 ms, peak 10.15 MB per rank (cpu profile, uncalibrated)\n"
            "magi: plan 09bc51981c6317fe: 6 all-gathers (1.068 MB), 3 reduce-scatters (0.534 MB) per step\n");
  step.calibration_summary = "calibration (cpu): 134 kernels";
  step.pipeline = "bucket-collectives";
  step.calibration = "auto";
  step.deterministic = true;
  const std::string report = CompileReport(step);
  EXPECT_TRUE(absl::StrContains(report,
                                "compiled in 1.0 s\nmagi: calibration (cpu): 134 kernels\nmagi: pipeline "
                                "bucket-collectives; predicted step 19.4 ms, peak 10.15 MB per rank (cpu "
                                "profile, calibrated)\n"))
      << report;
  EXPECT_TRUE(absl::EndsWith(report, " per step (the same on all 2 ranks)\n")) << report;
}

TEST(TrainReportTest, SummaryJson) {
  Summary summary;
  summary.steps = 2;
  summary.memory_budget_bytes = 8412278;
  summary.energy_json = "\"gpu_joules_per_step\": -1.000";
  summary.timed_step_seconds = {0.5, 0.25};
  summary.losses = {5.5, 4.25};
  std::string json = SummaryJson(summary);
  EXPECT_TRUE(absl::EndsWith(json, "\"losses\": [5.50000000, 4.25000000]}\n")) << json;
  EXPECT_TRUE(absl::StrContains(json, "\"memory_budget_bytes\": 8412278,")) << json;
  EXPECT_TRUE(absl::StrContains(json, "\"timed_step_seconds\": [0.500000, 0.250000], \"gpu_joules_per_step\": -1.000,"))
      << json;
  EXPECT_TRUE(absl::StrContains(json, "\"eager_max_relative_loss_difference\": null,")) << json;
  summary.check_eager = true;
  summary.eager_max_relative_loss_difference = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(absl::StrContains(SummaryJson(summary), "\"eager_max_relative_loss_difference\": \"nan\","));
  summary.eager_max_relative_loss_difference = 1.5e-7;
  EXPECT_TRUE(absl::StrContains(SummaryJson(summary), "\"eager_max_relative_loss_difference\": 1.500e-07,"));
}

}  // namespace
}  // namespace magi::examples
