#include "magi/passes/batch_invariant.h"

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/collectives.h"
#include "magi/ir/printer.h"
#include "magi/ir/parser.h"
#include "magi/ir/verifier.h"
#include "magi/passes/pass_test_util.h"
#include "magi/registry/registry.h"

namespace magi {
namespace {

using testing::CountOps;

// Parses `input`, runs the pass spec on it, checks `expect_changed` and the verifier,
// and returns the printed module.
std::string RunPassOnText(absl::string_view spec, absl::string_view input, bool expect_changed) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(input);
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return "";
  auto parsed = ParseComponentSpec(spec);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  if (!parsed.ok()) return "";
  absl::StatusOr<std::unique_ptr<Pass>> pass = Registry<Pass>::Global().Create(parsed->first, parsed->second);
  EXPECT_TRUE(pass.ok()) << pass.status();
  if (!pass.ok()) return "";
  absl::StatusOr<bool> changed = (*pass)->Run(**module);
  EXPECT_TRUE(changed.ok()) << changed.status();
  if (changed.ok()) {
    EXPECT_EQ(*changed, expect_changed);
  }
  absl::Status verified = VerifyModule(**module);
  EXPECT_TRUE(verified.ok()) << verified;
  return PrintModule(**module);
}

// A one-sequence forward with an FSDP all-gather: the gather does not depend on the
// data and must stay once; the matmul and silu do and are copied per sequence.
constexpr char kForward[] = R"(module @m {
  process_group @dp {axis = "dp", size = 2, ranks = [0, 1]}
  graph @forward {
    input %w.shard: f32[2,4] {role = param}
    input %x: f32[1,3,4]
    %f = magi::all_gather_start([%w.shard], group = "dp") : future<f32[4,4]>
    %w = magi::wait(%f) : f32[4,4]
    %wt = aten::t(%w) : f32[4,4]strides[1,4]
    %h = aten::matmul(%x, %wt) : f32[1,3,4]
    %y = aten::silu(%h) : f32[1,3,4]
    output y = %y
    output w = %w
  }
}
)";

TEST(BatchInvariantTest, CopiesDataDependentNodesPerSequenceAndSharesTheRest) {
  std::string out = RunPassOnText("batch-invariant{batch=3}", kForward, /*expect_changed=*/true);
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(out);
  ASSERT_TRUE(module.ok()) << module.status();
  const Graph& graph = *(*module)->graphs()[0];
  EXPECT_EQ(CountOps(graph, kAllGatherStartOp), 1);
  EXPECT_EQ(CountOps(graph, "aten::t"), 1);
  EXPECT_EQ(CountOps(graph, "aten::matmul"), 3);
  EXPECT_EQ(CountOps(graph, "aten::silu"), 3);
  EXPECT_EQ(CountOps(graph, "aten::slice.Tensor"), 3);
  EXPECT_EQ(CountOps(graph, "aten::cat"), 1);
  // Inputs keep their names and order; the data input takes 3 sequences.
  ASSERT_EQ(graph.inputs().size(), 2u);
  EXPECT_EQ(graph.inputs()[0]->name(), "w.shard");
  EXPECT_EQ(graph.inputs()[1]->name(), "x");
  EXPECT_EQ(graph.inputs()[1]->type().ToString(), "f32[3,3,4]");
  // Every copy works on one sequence's shapes; the output is the three side by side.
  for (const Node* node : graph.nodes()) {
    if (node->op() == "aten::matmul" || node->op() == "aten::silu") {
      EXPECT_EQ(node->result(0)->type().ToString(), "f32[1,3,4]") << node->DebugName();
    }
  }
  ASSERT_EQ(graph.outputs().size(), 2u);
  EXPECT_EQ(graph.outputs()[0].name, "y");
  EXPECT_EQ(graph.outputs()[0].value->type().ToString(), "f32[3,3,4]");
  EXPECT_EQ(graph.outputs()[0].value->producer()->op(), "aten::cat");
  EXPECT_EQ(graph.outputs()[1].value->producer()->op(), kWaitOp);  // not data: as it was
}

TEST(BatchInvariantTest, SequenceBReadsRowBAndNodesStayNodeMajor) {
  std::string out = RunPassOnText("batch-invariant{batch=2}", kForward, /*expect_changed=*/true);
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(out);
  ASSERT_TRUE(module.ok()) << module.status();
  std::vector<std::string> order;
  for (const Node* node : (*module)->graphs()[0]->nodes()) {
    order.push_back(node->op());
    if (node->op() == "aten::slice.Tensor") {
      int64_t b = node->args()[2].value.as_int();
      EXPECT_EQ(node->args()[3].value.as_int(), b + 1);
      EXPECT_EQ(node->args()[1].value.as_int(), 0);  // dim 0
    }
  }
  // Both sequences' matmuls, then both silus: one layer at a time for every sequence.
  std::vector<std::string> expected = {std::string(kAllGatherStartOp),
                                       std::string(kWaitOp),
                                       "aten::t",
                                       "aten::slice.Tensor",
                                       "aten::matmul",
                                       "aten::slice.Tensor",
                                       "aten::matmul",
                                       "aten::silu",
                                       "aten::silu",
                                       "aten::cat"};
  EXPECT_EQ(order, expected);
}

TEST(BatchInvariantTest, BatchOfOneChangesNothing) {
  std::string out = RunPassOnText("batch-invariant{batch=1}", kForward, /*expect_changed=*/false);
  absl::StatusOr<std::unique_ptr<Module>> original = ParseModule(kForward);
  ASSERT_TRUE(original.ok());
  EXPECT_EQ(out, PrintModule(**original));
}

TEST(BatchInvariantTest, GraphsWithoutDataStayAsTheyAre) {
  constexpr char kNoData[] = R"(module @m {
  graph @g {
    input %w: f32[2,4] {role = param}
    %y = aten::relu(%w) : f32[2,4]
    output y = %y
  }
}
)";
  RunPassOnText("batch-invariant{batch=4}", kNoData, /*expect_changed=*/false);
}

TEST(BatchInvariantTest, DonatedInputsStayDonated) {
  // A decode step's cache update: the new cache aliases the old one (donation).
  constexpr char kCache[] = R"(module @m {
  graph @g {
    input %cache: f32[1,2,8,4]
    input %index: i64[1,2,1,4]
    input %kv: f32[1,2,1,4]
    %cache2 = aten::scatter.src(%cache, 2, %index, %kv) : f32[1,2,8,4]
    output cache = %cache2 {aliases = %cache}
  }
}
)";
  std::string out = RunPassOnText("batch-invariant{batch=3}", kCache, /*expect_changed=*/true);
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(out);
  ASSERT_TRUE(module.ok()) << module.status();
  const Graph& g = *(*module)->FindGraph("g");
  ASSERT_EQ(g.outputs().size(), 1u);
  ASSERT_NE(g.outputs()[0].aliases, nullptr) << out;
  EXPECT_EQ(g.outputs()[0].aliases->name(), "cache");
  EXPECT_EQ(g.outputs()[0].aliases->type().ToString(), "f32[3,2,8,4]");
  EXPECT_EQ(CountOps(g, "aten::scatter.src"), 3);
}

absl::Status RunOn(const char* text, int64_t batch) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(text);
  if (!module.ok()) return module.status();
  BatchInvariantOptions options;
  options.batch = batch;
  BatchInvariant pass(options);
  return pass.Run(**module).status();
}

TEST(BatchInvariantTest, RefusesGraphsCapturedForSeveralSequences) {
  constexpr char kTwo[] = R"(module @m {
  graph @g {
    input %x: f32[2,4]
    %y = aten::relu(%x) : f32[2,4]
    output y = %y
  }
}
)";
  absl::Status status = RunOn(kTwo, 4);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "batch-invariant: @g: data input %x is f32[2,4]; the graph must be captured for one sequence (a tensor "
            "whose dim 0 is 1)");
}

TEST(BatchInvariantTest, RefusesOutputsThatAreNotPerSequence) {
  constexpr char kLoss[] = R"(module @m {
  graph @g {
    input %x: f32[1,4]
    %l = aten::sum(%x) : f32[]
    output loss = %l
  }
}
)";
  absl::Status status = RunOn(kLoss, 2);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "batch-invariant: @g: output 'loss' (%l: f32[]) depends on the data but has no sequence dim 0 of size 1");
}

TEST(BatchInvariantTest, RefusesRandomOpsOnTheData) {
  constexpr char kDropout[] = R"(module @m {
  graph @g {
    input %x: f32[1,4]
    %y = aten::bernoulli(%x) : f32[1,4]
    output y = %y
  }
}
)";
  absl::Status status = RunOn(kDropout, 2);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("draws random numbers and depends on the data"), std::string::npos) << status;
}

TEST(BatchInvariantTest, OptionsAreChecked) {
  absl::StatusOr<std::unique_ptr<Pass>> missing = Registry<Pass>::Global().Create("batch-invariant");
  EXPECT_EQ(missing.status().message(), "batch-invariant: needs batch=N (sequences per run)");
  absl::StatusOr<std::unique_ptr<Pass>> zero = Registry<Pass>::Global().Create("batch-invariant", {{"batch", "0"}});
  EXPECT_EQ(zero.status().message(), "batch-invariant: batch must be an integer >= 1, not '0'");
}

}  // namespace
}  // namespace magi
