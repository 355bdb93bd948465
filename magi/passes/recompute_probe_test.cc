#include "magi/passes/recompute_probe.h"

#include <random>

#include "gtest/gtest.h"
#include "magi/analysis/memory_plan.h"
#include "magi/analysis/op_traits.h"
#include "magi/ir/printer.h"
#include "magi/passes/auto_recompute.h"
#include "magi/passes/pass_test_util.h"
#include "magi/passes/phase_util.h"
#include "magi/passes/schedule_util.h"

namespace magi {
namespace {

using testing::LoadTestdata;
using testing::RunPipeline;

// The peak of the real rewrite: RecomputeForBackward, PlanMemory, undo.
int64_t RewrittenPeak(Graph& graph, const std::vector<Node*>& chosen) {
  RecomputeUndo undo;
  RecomputeForBackward(graph, chosen, &undo);
  absl::StatusOr<MemoryPlan> plan = PlanMemory(graph, /*assign_buffers=*/false);
  UndoRecompute(graph, undo);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? plan->peak_bytes : -1;
}

// Forward compute nodes a recompute could choose (a superset of AutoRecompute's
// candidates: views and nodes without backward uses are included too, and must be
// predicted right as well).
std::vector<Node*> ForwardNodes(const Graph& graph) {
  std::vector<Node*> nodes = graph.nodes();
  int boundary = BackwardBoundary(graph);
  std::vector<Node*> forward;
  for (int i = 0; i < boundary; ++i) {
    if (IsMovable(*nodes[i]) && nodes[i]->num_results() > 0) forward.push_back(nodes[i]);
  }
  return forward;
}

// Compares the probe with the rewrite on prefixes (in program order and in reverse) and
// on random subsets of the forward nodes.
void ExpectProbeMatchesRewrite(const std::string& file, const std::string& pipeline, int samples) {
  SCOPED_TRACE(file + " after " + pipeline);
  auto module = LoadTestdata(file);
  ASSERT_NE(module, nullptr);
  if (!pipeline.empty()) RunPipeline(*module, pipeline);
  Graph& graph = *module->graphs()[0];
  const std::string before = PrintModule(*module);
  absl::StatusOr<RecomputePeakProbe> probe = RecomputePeakProbe::Build(graph);
  ASSERT_TRUE(probe.ok()) << probe.status();
  std::vector<Node*> forward = ForwardNodes(graph);
  ASSERT_GT(forward.size(), 20u);
  std::vector<Node*> reversed(forward.rbegin(), forward.rend());
  std::mt19937 random(7);
  int differing = 0;
  for (int sample = 0; sample < samples; ++sample) {
    std::vector<Node*> chosen;
    size_t count = 1 + sample * forward.size() / samples;
    if (sample % 3 == 0) {
      chosen.assign(forward.begin(), forward.begin() + count);
    } else if (sample % 3 == 1) {
      chosen.assign(reversed.begin(), reversed.begin() + count);
    } else {
      for (Node* node : forward) {
        if (random() % 4 == 0) chosen.push_back(node);
      }
    }
    int64_t predicted = probe->Peak(chosen);
    int64_t rewritten = RewrittenPeak(graph, chosen);
    differing += predicted != rewritten;
    EXPECT_EQ(predicted, rewritten) << "sample " << sample << ", " << chosen.size() << " nodes";
  }
  EXPECT_EQ(differing, 0);
  EXPECT_EQ(PrintModule(*module), before);  // the probe changes nothing
}

TEST(RecomputePeakProbeTest, MatchesTheRewriteOnTheTinyLlamaStep) {
  ExpectProbeMatchesRewrite("llama4_fsdp_step.mir", "", 60);
  ExpectProbeMatchesRewrite("llama4_fsdp_step.mir", "reshard-after-forward{mode=reshard},schedule-overlap{prefetch=2}",
                            60);
  ExpectProbeMatchesRewrite("llama4_fsdp_step.mir",
                            "reshard-after-forward{mode=keep},bucket-collectives{max_mb=0.3},schedule-overlap{prefetch=1}",
                            60);
}

// The 8B-shaped step with 4 layers (magi/benchmarks:dump_step_8b --layers=4): bf16
// gathers of fp32 shards through casts, regathers in backward, attention and the loss.
TEST(RecomputePeakProbeTest, MatchesTheRewriteOnThe8BShapedStep) {
  ExpectProbeMatchesRewrite("step8b_4layers.mir", "", 45);
  ExpectProbeMatchesRewrite("step8b_4layers.mir", "schedule-overlap{prefetch=2}", 45);
  ExpectProbeMatchesRewrite("step8b_4layers.mir", "reshard-after-forward{groups=root+layers.3,mode=keep},schedule-overlap{per_gather=root.bwd.0,prefetch=1}", 45);
}

TEST(RecomputePeakProbeTest, NothingChosenIsThePlannersPeak) {
  auto module = LoadTestdata("llama4_fsdp_step.mir");
  ASSERT_NE(module, nullptr);
  Graph& graph = *module->graphs()[0];
  absl::StatusOr<RecomputePeakProbe> probe = RecomputePeakProbe::Build(graph);
  ASSERT_TRUE(probe.ok());
  EXPECT_EQ(probe->Peak({}), PlanMemory(graph)->peak_bytes);
}

}  // namespace
}  // namespace magi
