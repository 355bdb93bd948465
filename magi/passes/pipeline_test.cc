#include "magi/passes/pipeline.h"

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/parser.h"
#include "magi/ir/printer.h"

namespace magi {
namespace {

TEST(PipelineTest, ParsesAndPrintsBack) {
  for (absl::string_view text : {"dce", "dce,cse,dce", "bucket-collectives{max_mb=64},schedule-overlap{prefetch=2}",
                                 "fixed-point{max_iterations=4}(cse,dce),dce"}) {
    auto pipeline = ParsePassPipeline(text);
    ASSERT_TRUE(pipeline.ok()) << pipeline.status();
    EXPECT_EQ(PrintPassPipeline(*pipeline), text);
  }
  auto parsed = ParsePassPipeline("auto-recompute{budget_gb=40,solver=dp}");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ((*parsed)[0].options.at("budget_gb"), "40");
  EXPECT_EQ((*parsed)[0].options.at("solver"), "dp");
}

TEST(PipelineTest, BadSpecsNameTheColumn) {
  EXPECT_EQ(ParsePassPipeline("").status().message(), "pass pipeline, column 1: expected a pass name");
  EXPECT_EQ(ParsePassPipeline("dce,").status().message(), "pass pipeline, column 5: expected a pass name");
  EXPECT_EQ(ParsePassPipeline("a{x}").status().message(), "pass pipeline, column 4: expected '=' after option 'x'");
  EXPECT_EQ(ParsePassPipeline("a{x=1,x=2}").status().message(), "pass pipeline, column 10: option 'x' twice");
  EXPECT_EQ(ParsePassPipeline("a(b").status().message(), "pass pipeline, column 4: expected ')'");
  EXPECT_EQ(ParsePassPipeline("a b").status().message(), "pass pipeline, column 2: unexpected ' '");
}

constexpr absl::string_view kRedundant = R"(module @m {
  graph @g {
    input %x: f32[4]
    %a = aten::neg(%x) : f32[4]
    %b = aten::neg(%x) : f32[4]
    %dead = aten::exp(%b) : f32[4]
    %c = aten::add.Tensor(%a, %b, alpha = 1) : f32[4]
    output c = %c
  }
}
)";

TEST(PipelineTest, ManagerRunsRegisteredPassesAndCountsThem) {
  auto module = ParseModule(kRedundant);
  ASSERT_TRUE(module.ok());
  PassManager manager;
  ASSERT_TRUE(manager.AddPipeline(*ParsePassPipeline("fixed-point(cse,dce)")).ok());
  absl::StatusOr<bool> changed = manager.Run(**module);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(PrintModule(**module), R"(module @m {
  graph @g {
    input %x: f32[4]
    %a = aten::neg(%x) : f32[4]
    %c = aten::add.Tensor(%a, %a, alpha = 1) : f32[4]
    output c = %c
  }
}
)");
  ASSERT_EQ(manager.statistics().size(), 1u);
  EXPECT_EQ(manager.statistics()[0].name, "fixed-point");
  EXPECT_EQ(manager.statistics()[0].changed, 1);
}

// A pass that breaks SSA on purpose, to check the verifier runs after each pass.
class BreakingPass : public Pass {
 public:
  absl::string_view name() const override { return "break-ssa"; }

 protected:
  absl::StatusOr<bool> RunImpl(Module& module) override {
    Graph* graph = module.graphs()[0];
    std::vector<Node*> nodes = graph->nodes();
    graph->MoveBefore(nodes.back(), nodes.front());
    return true;
  }
};

TEST(PipelineTest, VerifierNamesThePassThatBrokeTheModule) {
  auto module = ParseModule(kRedundant);
  ASSERT_TRUE(module.ok());
  PassManager manager;
  manager.AddPass<BreakingPass>();
  absl::StatusOr<bool> changed = manager.Run(**module);
  ASSERT_FALSE(changed.ok());
  EXPECT_EQ(changed.status().message().substr(0, 52), "the module does not verify after pass 'break-ssa':\ng");
}

TEST(PipelineTest, UnknownPassesAndBadOptions) {
  PassManager manager;
  EXPECT_EQ(manager.AddPipeline(*ParsePassPipeline("dce,nope")).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(manager.AddPipeline(*ParsePassPipeline("fixed-point{max_iterations=0}(dce)")).message(),
            "fixed-point: max_iterations must be an integer >= 1, not '0'");
  EXPECT_EQ(manager.AddPipeline(*ParsePassPipeline("fixed-point")).message(),
            "fixed-point needs an inner pipeline: fixed-point(a,b)");
  EXPECT_EQ(manager.AddPipeline(*ParsePassPipeline("cse{aggressive=1}")).message(), "cse: unknown option 'aggressive'; there are no options");
}

}  // namespace
}  // namespace magi
