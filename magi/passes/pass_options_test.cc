// Typed pass options: every registered pass prints back the canonical text it was built
// from, and the option table parses, prints and refuses as pass_options.h says.
#include "magi/passes/pass_options.h"

#include <memory>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "magi/passes/auto_recompute.h"
#include "magi/passes/bucket_collectives.h"
#include "magi/passes/pass_registration.h"
#include "magi/passes/pipeline.h"
#include "magi/passes/reshard_after_forward.h"
#include "magi/passes/schedule_overlap.h"
#include "magi/registry/registry.h"

namespace magi {
namespace {

// Canonical specs: options in key order, defaults left out except those always printed.
// Every registered pass has a row (RoundTripCoversEveryRegisteredPass).
constexpr const char* kCanonicalSpecs[] = {
    "align-collectives",
    "align-collectives{max_nodes=8}",
    "auto-recompute{budget_mb=1.340832,profile=cpu}",
    "batch-invariant{batch=2}",
    "bucket-collectives{max_mb=64}",
    "bucket-collectives{kinds=all_gather,max_mb=2}",
    "bucket-collectives{kinds=reduce_scatter,max_mb=0.5}",
    "concat-matmuls",
    "cse",
    "dce",
    "elide-copies",
    "elide-single-rank-collectives",
    "hoist-weight-preparation",
    "recompute-fusible",
    "reshard-after-forward{mode=reshard}",
    "reshard-after-forward{except=root+layers.1,mode=reshard}",
    "reshard-after-forward{groups=root+layers.1,mode=keep}",
    "schedule-overlap{prefetch=1}",
    "schedule-overlap{max_inflight_mb=90,per_gather=layers.0.fwd.1+root.bwd.0,prefetch=2}",
    "slice-grads-to-cat",
    "split-master-weights",
};

TEST(PassOptionsTest, EveryPassPrintsTheCanonicalTextItWasBuiltFrom) {
  for (const char* spec : kCanonicalSpecs) {
    absl::StatusOr<std::pair<std::string, ComponentOptions>> parsed = ParseComponentSpec(spec);
    ASSERT_TRUE(parsed.ok()) << spec << ": " << parsed.status();
    absl::StatusOr<std::unique_ptr<Pass>> pass = Registry<Pass>::Global().Create(parsed->first, parsed->second);
    ASSERT_TRUE(pass.ok()) << spec << ": " << pass.status();
    EXPECT_EQ((*pass)->Print(), spec);
  }
}

TEST(PassOptionsTest, RoundTripCoversEveryRegisteredPass) {
  std::set<std::string> covered;
  for (const char* spec : kCanonicalSpecs) covered.insert(ParseComponentSpec(spec)->first);
  for (const std::string& name : Registry<Pass>::Global().Names()) {
    EXPECT_TRUE(covered.count(name)) << "add a canonical spec of '" << name << "' to kCanonicalSpecs";
  }
}

TEST(PassOptionsTest, APipelineBuiltFromTextPrintsItBack) {
  const std::string text =
      "reshard-after-forward{mode=keep},fixed-point{max_iterations=3}(cse,dce),"
      "bucket-collectives{kinds=all_gather,max_mb=1},schedule-overlap{prefetch=2}";
  PassManager manager;
  ASSERT_TRUE(manager.AddPipeline(*ParsePassPipeline(text)).ok());
  EXPECT_EQ(manager.Print(), text);
  EXPECT_EQ(PassManager().Print(), "");
}

TEST(PassOptionsTest, ParseFillsTheTypedFieldsAndPrintWritesThemBack) {
  absl::StatusOr<ScheduleOverlapOptions> schedule =
      ScheduleOverlapOptions::Parse({{"prefetch", "3"}, {"max_inflight_mb", "1.5"}, {"per_gather", "root.bwd.0"}});
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  EXPECT_EQ(schedule->prefetch, 3);
  EXPECT_EQ(schedule->max_inflight_mb, 1.5);
  EXPECT_EQ(schedule->per_gather, (PerGatherPrefetch{{"root.bwd", 0}}));
  EXPECT_EQ(schedule->Print(), "max_inflight_mb=1.5,per_gather=root.bwd.0,prefetch=3");

  absl::StatusOr<ReshardAfterForwardOptions> keep = ReshardAfterForwardOptions::Parse({{"mode", "keep"},
                                                                                       {"groups", "root+layers.3"}});
  ASSERT_TRUE(keep.ok()) << keep.status();
  EXPECT_FALSE(keep->reshard);
  EXPECT_EQ(keep->groups, (std::set<std::string>{"", "layers.3"}));
  EXPECT_TRUE(keep->except.empty());

  BucketCollectivesOptions buckets;  // defaults: printed where always printed
  EXPECT_EQ(buckets.Print(), "max_mb=64");
  buckets.kinds = CollectiveKind::kReduceScatter;
  EXPECT_EQ(buckets.Print(), "kinds=reduce_scatter,max_mb=64");

  // budget_gb is another spelling of budget_mb: read, printed as budget_mb.
  absl::StatusOr<AutoRecomputeOptions> budget = AutoRecomputeOptions::Parse({{"budget_gb", "2"}});
  ASSERT_TRUE(budget.ok()) << budget.status();
  EXPECT_EQ(budget->budget_bytes, 2000000000);
  EXPECT_EQ(budget->Print(), "budget_mb=2000.000000");
  EXPECT_EQ(AutoRecomputeOptions::Budget(1340832, "h200").Print(), "budget_mb=1.340832,profile=h200");
}

TEST(PassOptionsTest, BadTextIsRefusedNamingThePassAndTheOption) {
  auto error = [](const char* name, ComponentOptions options) {
    return std::string(Registry<Pass>::Global().Create(name, options).status().message());
  };
  EXPECT_EQ(error("bucket-collectives", {{"size", "1"}}),
            "bucket-collectives: unknown option 'size'; the options are max_mb=X, kinds=all|all_gather|reduce_scatter");
  EXPECT_EQ(error("bucket-collectives", {{"max_mb", "lots"}}),
            "bucket-collectives: max_mb must be a non-negative, finite number, not 'lots'");
  EXPECT_EQ(error("bucket-collectives", {{"max_mb", "nan"}}),
            "bucket-collectives: max_mb must be a non-negative, finite number, not 'nan'");
  EXPECT_EQ(error("bucket-collectives", {{"kinds", "all_reduce"}}),
            "bucket-collectives: kinds must be one of all|all_gather|reduce_scatter, not 'all_reduce'");
  EXPECT_EQ(error("schedule-overlap", {{"prefetch", "65"}}),
            "schedule-overlap: prefetch must be an integer in 0..64, not '65'");
  EXPECT_EQ(error("align-collectives", {{"max_nodes", "-1"}}),
            "align-collectives: max_nodes must be an integer >= 0, not '-1'");
  EXPECT_EQ(error("reshard-after-forward", {{"groups", "layers.0++root"}}),
            "reshard-after-forward: groups must be module paths joined by + (root for the root group), not "
            "'layers.0++root'");
  EXPECT_EQ(error("auto-recompute", {}), "auto-recompute: needs budget_mb=N or budget_gb=X");
  EXPECT_EQ(error("auto-recompute", {{"budget_gb", "1e300"}}),
            "auto-recompute: budget_gb must be a positive, finite number of gigabytes (below 2^63 bytes), not '1e300'");
  EXPECT_EQ(error("dce", {{"aggressive", "1"}}), "dce: unknown option 'aggressive'; there are no options");
  for (const char* name : {"dce", "bucket-collectives", "auto-recompute"}) {
    EXPECT_EQ(Registry<Pass>::Global().Create(name, {{"nope", "1"}}).status().code(),
              absl::StatusCode::kInvalidArgument)
        << name;
  }
}

// A pass written the way pass_options.h shows, outside the registry: typed in code, and
// the same text through the registration helper.
struct DemoOptions : PassOptions<DemoOptions> {
  int rounds = 1;
  double scale = 0.5;
  static const OptionSchema<DemoOptions>& Schema() {
    static const auto* schema = new OptionSchema<DemoOptions>({
        Field("rounds", &DemoOptions::rounds, Integer(1, 8), kAlwaysPrinted),
        Field("scale", &DemoOptions::scale, Number(0, /*exclusive=*/true)),
    });
    return *schema;
  }
};

class DemoPass : public GraphPass {
 public:
  using Options = DemoOptions;
  static constexpr absl::string_view kName = "demo";
  explicit DemoPass(Options options = {}) : options_(options) {}
  absl::string_view name() const override { return kName; }
  std::string PrintOptions() const override { return options_.Print(); }
  int graphs_seen = 0;

 protected:
  absl::StatusOr<bool> RunOnGraph(Graph& graph) override {
    ++graphs_seen;
    return graph.name() == "changed";
  }

 private:
  Options options_;
};

TEST(PassOptionsTest, ARegisteredPassHelperParsesIntoTheTypedPass) {
  absl::StatusOr<std::unique_ptr<Pass>> pass = MakeRegisteredPass<DemoPass>({{"scale", "2"}});
  ASSERT_TRUE(pass.ok()) << pass.status();
  EXPECT_EQ((*pass)->Print(), "demo{rounds=1,scale=2}");
  EXPECT_EQ(MakeRegisteredPass<DemoPass>({{"scale", "0"}}).status().message(),
            "demo: scale must be a positive, finite number, not '0'");
  EXPECT_EQ(MakeRegisteredPass<DemoPass>({{"rounds", "9"}}).status().message(),
            "demo: rounds must be an integer in 1..8, not '9'");
}

TEST(PassOptionsTest, AGraphPassRunsOnEveryGraph) {
  Module module("m");
  module.AddGraph("same");
  module.AddGraph("changed");
  module.AddGraph("other");
  DemoPass pass;
  absl::StatusOr<bool> changed = pass.Run(module);
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  EXPECT_EQ(pass.graphs_seen, 3);
}

}  // namespace
}  // namespace magi
