// The text a setting prints is the report and the `magi opt` recipe: these pin it to the
// form docs/passes.md and earlier reports show, byte for byte.
#include "magi/search/strategy_knobs.h"

#include "gtest/gtest.h"
#include "magi/cost/cost_model.h"
#include "magi/cost/device_profile.h"

namespace magi {
namespace {

TEST(StrategyKnobsTest, DefaultKnobsPrintTheirPasses) {
  StrategyKnobs knobs;
  EXPECT_EQ(StructuralPipeline(knobs), "reshard-after-forward{mode=reshard}");
  EXPECT_EQ(KnobsPipeline(knobs), "reshard-after-forward{mode=reshard},schedule-overlap{prefetch=1}");
  knobs.prefetch = -1;
  EXPECT_EQ(KnobsPipeline(knobs), "reshard-after-forward{mode=reshard}");
}

TEST(StrategyKnobsTest, APlanPrintsAsTheSearchReportsIt) {
  // The 2-rank plan of docs/passes.md's optimized-steps-agree table.
  StrategyKnobs knobs;
  knobs.keep = {"", "layers.1"};
  knobs.bucket_all_gather_mb = 2;
  knobs.bucket_reduce_scatter_mb = 2;
  knobs.prefetch = 0;
  knobs.per_gather = {{"layers.0.fwd", 1}, {"layers.1.fwd", 1}};
  CostModel model(*LoadDeviceProfile("cpu"));
  EXPECT_EQ(PlanPipeline(knobs, 1340832, model),
            "reshard-after-forward{except=root+layers.1,mode=reshard},reshard-after-forward{groups=root+layers.1,"
            "mode=keep},bucket-collectives{kinds=all_gather,max_mb=2},bucket-collectives{kinds=reduce_scatter,"
            "max_mb=2},schedule-overlap{per_gather=layers.0.fwd.1+layers.1.fwd.1,prefetch=0},auto-recompute{budget_"
            "mb=1.340832,profile=cpu}");
  EXPECT_EQ(PlanPipeline(knobs, 0, model), KnobsPipeline(knobs));

  StrategyKnobs capped;
  capped.bucket_reduce_scatter_mb = 0.5;
  capped.prefetch = 2;
  capped.max_inflight_mb = 90;
  EXPECT_EQ(KnobsPipeline(capped),
            "reshard-after-forward{mode=reshard},bucket-collectives{kinds=reduce_scatter,max_mb=0.5},"
            "schedule-overlap{max_inflight_mb=90,prefetch=2}");
}

TEST(StrategyKnobsTest, ThePassesAreTheOnesThePrintedTextNames) {
  StrategyKnobs knobs;
  knobs.keep = {"layers.3"};
  knobs.bucket_all_gather_mb = 4;
  PassManager manager;
  AddKnobsPasses(knobs, manager);
  EXPECT_EQ(manager.Print(), KnobsPipeline(knobs));
  EXPECT_EQ(ScheduleOptions(knobs).Print(), "prefetch=1");
}

}  // namespace
}  // namespace magi
