#include "magi/passes/align_collectives.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "magi/ir/collectives.h"
#include "magi/ir/parser.h"
#include "magi/ir/printer.h"
#include "magi/ir/verifier.h"
#include "magi/passes/pass_test_util.h"
#include "magi/passes/pipeline.h"

namespace magi {
namespace {

// The Llama block boundary of the forward as captured: the wait for the next block's
// weights right before RMSNorm's `* weight`, after `x * rsqrt(mean(x^2))`.
constexpr char kForwardBoundary[] = R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %h: f32[4,8]
    input %w2: f32[8,8]
    input %norm.shard: f32[4]
    input %wq.shard: f32[4,8]
    %w2t = aten::t(%w2) : f32[8,8]strides[1,8]
    %mm = aten::mm(%h, %w2t) : f32[4,8]
    %y = aten::add.Tensor(%h, %mm, alpha = 1) : f32[4,8]
    %sq = aten::pow.Tensor_Scalar(%y, 2) : f32[4,8]
    %mean = aten::mean.dim(%sq, [-1], true, dtype = none) : f32[4,1]
    %r = aten::rsqrt(%mean) : f32[4,1]
    %n = aten::mul.Tensor(%y, %r) : f32[4,8]
    %fn, %fq = magi::all_gather_start([%norm.shard, %wq.shard], group = "dp") : future<f32[8]>, future<f32[8,8]>
    %norm, %wq = magi::wait(%fn, %fq) : f32[8], f32[8,8]
    %nw = aten::mul.Tensor(%n, %norm) : f32[4,8]
    %wqt = aten::t(%wq) : f32[8,8]strides[1,8]
    %q = aten::mm(%nw, %wqt) : f32[4,8]
    output q = %q
    output y = %y
  }
}
)";

TEST(AlignCollectivesTest, WaitInsideTheNormMovesToAfterTheGemm) {
  // The start and wait read nothing of the chain: both move up to the GEMM, so the add,
  // the norm and its `* weight` can be one fused kernel after them.
  EXPECT_EQ(testing::RunPassOnText("align-collectives", kForwardBoundary, /*expect_changed=*/true),
            R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %h: f32[4,8]
    input %w2: f32[8,8]
    input %norm.shard: f32[4]
    input %wq.shard: f32[4,8]
    %w2t = aten::t(%w2) : f32[8,8]strides[1,8]
    %mm = aten::mm(%h, %w2t) : f32[4,8]
    %fn, %fq = magi::all_gather_start([%norm.shard, %wq.shard], group = "dp") : future<f32[8]>, future<f32[8,8]>
    %norm, %wq = magi::wait(%fn, %fq) : f32[8], f32[8,8]
    %y = aten::add.Tensor(%h, %mm, alpha = 1) : f32[4,8]
    %sq = aten::pow.Tensor_Scalar(%y, 2) : f32[4,8]
    %mean = aten::mean.dim(%sq, [-1], true, dtype = none) : f32[4,1]
    %r = aten::rsqrt(%mean) : f32[4,1]
    %n = aten::mul.Tensor(%y, %r) : f32[4,8]
    %nw = aten::mul.Tensor(%n, %norm) : f32[4,8]
    %wqt = aten::t(%wq) : f32[8,8]strides[1,8]
    %q = aten::mm(%nw, %wqt) : f32[4,8]
    output q = %q
    output y = %y
  }
}
)");
}

TEST(AlignCollectivesTest, ReduceScatterAfterTheWeightGradMovesToTheNextGemm) {
  // The backward: the reduce-scatter reads the norm weight's gradient (it cannot move up;
  // the sum read only by the collective goes with it); the rest of the norm's backward
  // reads nothing of it, so it moves down to the GEMM.
  EXPECT_EQ(testing::RunPassOnText("align-collectives", R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %dy: f32[4,8]
    input %x: f32[4,8]
    input %norm: f32[8]
    input %w: f32[8,8]
    %gw = aten::mul.Tensor(%dy, %x) : f32[4,8]
    %dn = aten::mul.Tensor(%dy, %norm) : f32[4,8]
    %sw = aten::sum.dim_IntList(%gw, [0], false, dtype = none) : f32[8]
    %f = magi::reduce_scatter_start([%sw], group = "dp", reduce_op = "avg") : future<f32[4]>
    %g = magi::wait(%f) : f32[4]
    %s = aten::sum.dim_IntList(%dn, [1], true, dtype = none) : f32[4,1]
    %dx = aten::mul.Tensor(%dn, %s) : f32[4,8]
    %wt = aten::t(%w) : f32[8,8]strides[1,8]
    %dh = aten::mm(%dx, %wt) : f32[4,8]
    output dh = %dh
    output g = %g
  }
}
)",
                                   /*expect_changed=*/true),
            R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %dy: f32[4,8]
    input %x: f32[4,8]
    input %norm: f32[8]
    input %w: f32[8,8]
    %gw = aten::mul.Tensor(%dy, %x) : f32[4,8]
    %dn = aten::mul.Tensor(%dy, %norm) : f32[4,8]
    %s = aten::sum.dim_IntList(%dn, [1], true, dtype = none) : f32[4,1]
    %dx = aten::mul.Tensor(%dn, %s) : f32[4,8]
    %sw = aten::sum.dim_IntList(%gw, [0], false, dtype = none) : f32[8]
    %f = magi::reduce_scatter_start([%sw], group = "dp", reduce_op = "avg") : future<f32[4]>
    %g = magi::wait(%f) : f32[4]
    %wt = aten::t(%w) : f32[8,8]strides[1,8]
    %dh = aten::mm(%dx, %wt) : f32[4,8]
    output dh = %dh
    output g = %g
  }
}
)");
}

TEST(AlignCollectivesTest, LeavesGroupsBesideAnAnchorOrWithNowhereToGo) {
  const char* bodies[] = {
      // Already right after a GEMM (a view between does not count).
      "%mm = aten::mm(%a, %a) : f32[4,4]\n"
      "    %v = aten::view(%mm, [16]) : f32[16]\n"
      "    %f = magi::all_gather_start([%b], group = \"dp\") : future<f32[8]>\n"
      "    %g = magi::wait(%f) : f32[8]\n"
      "    %r = aten::relu(%v) : f32[16]\n"
      "    %y = aten::mul.Tensor(%r, %r) : f32[16]",
      // Inside a chain, but the wait's result is read next and the start reads the node
      // before: neither way is open.
      "%e = aten::exp(%b) : f32[4]\n"
      "    %f = magi::all_gather_start([%e], group = \"dp\") : future<f32[8]>\n"
      "    %g = magi::wait(%f) : f32[8]\n"
      "    %y = aten::relu(%g) : f32[8]\n"
      "    %z = aten::neg(%y) : f32[8]",
  };
  for (const char* body : bodies) {
    SCOPED_TRACE(body);
    std::string text = absl::StrCat(
        "module @m {\n  process_group @dp {axis = \"dp\", size = 2}\n  graph @g {\n    input %a: f32[4,4]\n"
        "    input %b: f32[4]\n    ",
        body, "\n    output y = %y\n  }\n}\n");
    testing::RunPassOnText("align-collectives", text, /*expect_changed=*/false);
  }
}

// The op order of graph @g of `module_text` after the pass with `extra_anchor`; checks that
// the result verifies and that a second run changes nothing.
// `moves`, if given, gets how many moves the first run made.
std::vector<std::string> OpsOfModuleAfterPass(const std::string& module_text, const ExtraAnchor& extra_anchor,
                                              int* moves = nullptr) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(module_text);
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return {};
  Graph& graph = *(*module)->FindGraph("g");
  const int made = AlignCollectives(graph, AlignCollectivesPass::kDefaultMaxNodes, extra_anchor);
  if (moves != nullptr) *moves = made;
  EXPECT_TRUE(VerifyModule(**module).ok());
  const std::string once = PrintModule(**module);
  EXPECT_EQ(AlignCollectives(graph, AlignCollectivesPass::kDefaultMaxNodes, extra_anchor), 0)
      << "not idempotent:\n" << once;
  std::vector<std::string> ops;
  for (const Node* node : graph.nodes()) ops.push_back(node->op());
  return ops;
}

// The same for `body`: nodes between the inputs %a: f32[4,4], %b: f32[4] and the output %y.
std::vector<std::string> OpsAfterPassWith(const std::string& body, const ExtraAnchor& extra_anchor) {
  return OpsOfModuleAfterPass(absl::StrCat("module @m {\n  process_group @dp {axis = \"dp\", size = 2}\n  graph @g {\n"
                                           "    input %a: f32[4,4]\n    input %b: f32[4]\n    ",
                                           body, "\n    output y = %y\n  }\n}\n"),
                              extra_anchor);
}

TEST(AlignCollectivesTest, StopsBesideEffectsAndOtherCollectives) {
  // A node with side effects is never crossed (nor fused: a cut beside it is free).
  EXPECT_EQ(OpsAfterPassWith("%e = aten::exp(%b) : f32[4]\n"
                         "    %f = magi::all_gather_start([%e], group = \"dp\") : future<f32[8]>\n"
                         "    %g = magi::wait(%f) : f32[8]\n"
                         "    %r = aten::relu(%e) : f32[4]\n"
                         "    %s = aten::relu_(%r) : f32[4]\n"
                         "    %t = aten::neg(%r) : f32[4]\n"
                         "    %mm = aten::mm(%a, %a) : f32[4,4]\n"
                         "    %y = aten::relu(%g) : f32[8]", nullptr),
            (std::vector<std::string>{"aten::exp", "aten::relu", "magi::all_gather_start", "magi::wait",
                                      "aten::relu_", "aten::neg", "aten::mm", "aten::relu"}));
  // Another collective is never crossed: the first group joins it (the two stay in order),
  // and the joined group goes on to the GEMM.
  EXPECT_EQ(OpsAfterPassWith("%e = aten::exp(%b) : f32[4]\n"
                         "    %f = magi::all_gather_start([%e], group = \"dp\") : future<f32[8]>\n"
                         "    %g = magi::wait(%f) : f32[8]\n"
                         "    %r = aten::relu(%e) : f32[4]\n"
                         "    %f2 = magi::all_gather_start([%r], group = \"dp\") : future<f32[8]>\n"
                         "    %g2 = magi::wait(%f2) : f32[8]\n"
                         "    %t = aten::neg(%r) : f32[4]\n"
                         "    %mm = aten::mm(%a, %a) : f32[4,4]\n"
                         "    %y = aten::add.Tensor(%g, %g2, alpha = 1) : f32[8]\n"
                         "    %z = aten::neg(%y) : f32[8]", nullptr),
            (std::vector<std::string>{"aten::exp", "aten::relu", "aten::neg", "magi::all_gather_start", "magi::wait",
                                      "magi::all_gather_start", "magi::wait", "aten::mm", "aten::add.Tensor",
                                      "aten::neg"}));
}

TEST(AlignCollectivesTest, CastsThatOnlyFeedTheCollectiveMoveWithIt) {
  // The gradient casts to the reduction dtype sit between the norm's backward and the
  // reduce-scatter; a fusing backend declines them (the primary folds them into the
  // reduction), but they are not a boundary: they go with the collective.
  const char* text = R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %dy: bf16[4,8]
    input %x: bf16[4,8]
    input %norm: bf16[8]
    input %w: bf16[8,8]
    input %gw2: bf16[8,8]
    %gw = aten::mul.Tensor(%dy, %x) : bf16[4,8]
    %dn = aten::mul.Tensor(%dy, %norm) : bf16[4,8]
    %sw = aten::sum.dim_IntList(%gw, [0], false, dtype = none) : bf16[8]
    %cw = aten::_to_copy(%sw, dtype = dtype(f32)) : f32[8]
    %c2 = aten::_to_copy(%gw2, dtype = dtype(f32)) : f32[8,8]
    %f1, %f2 = magi::reduce_scatter_start([%cw, %c2], group = "dp", reduce_op = "avg") : future<f32[4]>, future<f32[4,8]>
    %g1, %g2 = magi::wait(%f1, %f2) : f32[4], f32[4,8]
    %s = aten::sum.dim_IntList(%dn, [1], true, dtype = none) : bf16[4,1]
    %dx = aten::mul.Tensor(%dn, %s) : bf16[4,8]
    %wt = aten::t(%w) : bf16[8,8]strides[1,8]
    %dh = aten::mm(%dx, %wt) : bf16[4,8]
    output dh = %dh
    output g1 = %g1
    output g2 = %g2
  }
}
)";
  int moves = 0;
  EXPECT_EQ(OpsOfModuleAfterPass(text, [](const Node& node) { return node.op() == "aten::_to_copy"; }, &moves),
            (std::vector<std::string>{"aten::mul.Tensor", "aten::mul.Tensor", "aten::sum.dim_IntList",
                                      "aten::sum.dim_IntList", "aten::mul.Tensor", "aten::_to_copy", "aten::_to_copy",
                                      "magi::reduce_scatter_start", "magi::wait", "aten::t", "aten::mm"}));
  EXPECT_EQ(moves, 1);
}

TEST(AlignCollectivesTest, TheNearerSideWinsAndTiesKeepOverlap) {
  // A GEMM two nodes up and one two nodes down.
  const std::string chain_before = "%mm = aten::mm(%a, %a) : f32[4,4]\n    %e = aten::exp(%b) : f32[4]\n"
                                   "    %r = aten::relu(%e) : f32[4]\n    ";
  const std::string chain_after = "\n    %n = aten::neg(%b) : f32[4]\n    %s = aten::sin(%n) : f32[4]\n"
                                  "    %mm2 = aten::mm(%a, %a) : f32[4,4]\n    %y = aten::add.Tensor(%r, %s, alpha = 1) : f32[4]";
  // Waits only: later (the stream blocks later).
  EXPECT_EQ(OpsAfterPassWith("%f = magi::all_gather_start([%b], group = \"dp\") : future<f32[8]>\n    " + chain_before +
                                 "%g = magi::wait(%f) : f32[8]" + chain_after,
                             nullptr),
            (std::vector<std::string>{"magi::all_gather_start", "aten::mm", "aten::exp", "aten::relu", "aten::neg",
                                      "aten::sin", "magi::wait", "aten::mm", "aten::add.Tensor"}));
  // A start and its wait: earlier (the collective starts earlier).
  EXPECT_EQ(OpsAfterPassWith(chain_before + "%f = magi::all_gather_start([%b], group = \"dp\") : future<f32[8]>\n"
                                            "    %g = magi::wait(%f) : f32[8]" + chain_after,
                             nullptr),
            (std::vector<std::string>{"aten::mm", "magi::all_gather_start", "magi::wait", "aten::exp", "aten::relu",
                                      "aten::neg", "aten::sin", "aten::mm", "aten::add.Tensor"}));
  // One node further up: down is nearer.
  EXPECT_EQ(OpsAfterPassWith("%mm = aten::mm(%a, %a) : f32[4,4]\n    %c = aten::cos(%b) : f32[4]\n"
                             "    %e = aten::exp(%c) : f32[4]\n    %r = aten::relu(%e) : f32[4]\n"
                             "    %f = magi::all_gather_start([%b], group = \"dp\") : future<f32[8]>\n"
                             "    %g = magi::wait(%f) : f32[8]" + chain_after,
                             nullptr),
            (std::vector<std::string>{"aten::mm", "aten::cos", "aten::exp", "aten::relu", "aten::neg", "aten::sin",
                                      "magi::all_gather_start", "magi::wait", "aten::mm", "aten::add.Tensor"}));
}

TEST(AlignCollectivesTest, ALoneWaitNeverMovesUpAndALoneStartNeverMovesDown) {
  // Scheduled: the gather started a block ahead; its wait inside the norm must not block
  // the stream sooner, so it stays (the GEMM above is out of bounds for it).
  EXPECT_EQ(OpsAfterPassWith("%f = magi::all_gather_start([%b], group = \"dp\") : future<f32[8]>\n"
                             "    %mm = aten::mm(%a, %a) : f32[4,4]\n    %e = aten::exp(%b) : f32[4]\n"
                             "    %g = magi::wait(%f) : f32[8]\n    %y = aten::add.Tensor(%g, %g, alpha = 1) : f32[8]",
                             nullptr),
            (std::vector<std::string>{"magi::all_gather_start", "aten::mm", "aten::exp", "magi::wait",
                                      "aten::add.Tensor"}));
  // A start whose wait comes later: up to the GEMM (it starts sooner), never down past the
  // exp even where that is nearer.
  EXPECT_EQ(OpsAfterPassWith("%mm = aten::mm(%a, %a) : f32[4,4]\n    %n = aten::neg(%b) : f32[4]\n"
                             "    %c = aten::cos(%n) : f32[4]\n"
                             "    %f = magi::all_gather_start([%b], group = \"dp\") : future<f32[8]>\n"
                             "    %e = aten::exp(%c) : f32[4]\n    %mm2 = aten::mm(%a, %a) : f32[4,4]\n"
                             "    %g = magi::wait(%f) : f32[8]\n    %y = aten::add.Tensor(%g, %g, alpha = 1) : f32[8]",
                             nullptr),
            (std::vector<std::string>{"aten::mm", "magi::all_gather_start", "aten::neg", "aten::cos", "aten::exp",
                                      "aten::mm", "magi::wait", "aten::add.Tensor"}));
}

TEST(AlignCollectivesTest, AGroupWithItsWaitStaysWhileAnotherCollectiveIsInFlight) {
  // A big gather runs from the top to the end; a small gather with its wait sits inside a
  // chain. Moved up to the GEMM it would queue behind the big one with the chain waiting
  // for both (this graph with a 128 MB gather and 4 MB adds, `magi simulate --device=cpu`:
  // 51.2 -> 54.3 ms when the first version moved it): it stays.
  const std::string body = "%f1 = magi::all_gather_start([%b], group = \"dp\") : future<f32[8]>\n"
                           "    %mm = aten::mm(%a, %a) : f32[4,4]\n    %e = aten::exp(%mm) : f32[4,4]\n"
                           "    %f2 = magi::all_gather_start([%b], group = \"dp\") : future<f32[8]>\n"
                           "    %g2 = magi::wait(%f2) : f32[8]\n    %n = aten::neg(%e) : f32[4,4]\n"
                           "    %g1 = magi::wait(%f1) : f32[8]\n"
                           "    %y = aten::add.Tensor(%g1, %g2, alpha = 1) : f32[8]";
  EXPECT_EQ(OpsAfterPassWith(body, nullptr),
            (std::vector<std::string>{"magi::all_gather_start", "aten::mm", "aten::exp", "magi::all_gather_start",
                                      "magi::wait", "aten::neg", "magi::wait", "aten::add.Tensor"}));
  // Without the big gather in flight, the same group moves up to the GEMM.
  EXPECT_EQ(OpsAfterPassWith("%mm = aten::mm(%a, %a) : f32[4,4]\n    %e = aten::exp(%mm) : f32[4,4]\n"
                             "    %f2 = magi::all_gather_start([%b], group = \"dp\") : future<f32[8]>\n"
                             "    %g2 = magi::wait(%f2) : f32[8]\n    %n = aten::neg(%e) : f32[4,4]\n"
                             "    %y = aten::add.Tensor(%g2, %g2, alpha = 1) : f32[8]",
                             nullptr),
            (std::vector<std::string>{"aten::mm", "magi::all_gather_start", "magi::wait", "aten::exp", "aten::neg",
                                      "aten::add.Tensor"}));
}

TEST(AlignCollectivesTest, AGroupThatJoinsTheOneBeforeMovesOnWithIt) {
  // Group 2 moves up into group 1; the joined group then sits beside the GEMM at the top.
  // Group 3, after them, still moves down to its GEMM.
  EXPECT_EQ(OpsAfterPassWith("%mm = aten::mm(%a, %a) : f32[4,4]\n"
                             "    %f1 = magi::all_gather_start([%b], group = \"dp\") : future<f32[8]>\n"
                             "    %g1 = magi::wait(%f1) : f32[8]\n"
                             "    %e = aten::exp(%g1) : f32[8]\n"
                             "    %f2 = magi::all_gather_start([%b], group = \"dp\") : future<f32[8]>\n"
                             "    %g2 = magi::wait(%f2) : f32[8]\n"
                             "    %r = aten::relu(%e) : f32[8]\n"
                             "    %f3 = magi::all_gather_start([%b], group = \"dp\") : future<f32[8]>\n"
                             "    %g3 = magi::wait(%f3) : f32[8]\n"
                             "    %n = aten::neg(%r) : f32[8]\n"
                             "    %mm2 = aten::mm(%a, %a) : f32[4,4]\n"
                             "    %s = aten::add.Tensor(%n, %g2, alpha = 1) : f32[8]\n"
                             "    %y = aten::add.Tensor(%s, %g3, alpha = 1) : f32[8]",
                             nullptr),
            (std::vector<std::string>{"aten::mm", "magi::all_gather_start", "magi::wait", "magi::all_gather_start",
                                      "magi::wait", "aten::exp", "aten::relu", "aten::neg", "magi::all_gather_start",
                                      "magi::wait", "aten::mm", "aten::add.Tensor", "aten::add.Tensor"}));
}

TEST(AlignCollectivesTest, TheGraphsEndIsAPlaceToo) {
  // Waits whose results only the graph returns, no anchor below: they go to the end.
  EXPECT_EQ(OpsAfterPassWith("%f = magi::all_gather_start([%b], group = \"dp\") : future<f32[8]>\n"
                             "    %mm = aten::mm(%a, %a) : f32[4,4]\n    %e = aten::exp(%b) : f32[4]\n"
                             "    %r = aten::relu(%e) : f32[4]\n    %y = magi::wait(%f) : f32[8]\n"
                             "    %n = aten::neg(%r) : f32[4]\n    %s = aten::sin(%n) : f32[4]",
                             nullptr),
            (std::vector<std::string>{"magi::all_gather_start", "aten::mm", "aten::exp", "aten::relu", "aten::neg",
                                      "aten::sin", "magi::wait"}));
}

TEST(AlignCollectivesTest, ADeclinedViewIsABoundaryNotLookedThrough) {
  const std::string body = "%e = aten::exp(%b) : f32[4]\n    %v = aten::view(%e, [2, 2]) : f32[2,2]\n"
                           "    %f = magi::all_gather_start([%b], group = \"dp\") : future<f32[8]>\n"
                           "    %g = magi::wait(%f) : f32[8]\n    %n = aten::neg(%v) : f32[2,2]\n"
                           "    %mm = aten::mm(%a, %a) : f32[4,4]\n    %y = aten::add.Tensor(%g, %g, alpha = 1) : f32[8]";
  // Views looked through: exp and neg are fusible neighbours, so the group moves down to
  // the GEMM (one node; up to the graph's start would be two).
  EXPECT_EQ(OpsAfterPassWith(body, nullptr),
            (std::vector<std::string>{"aten::exp", "aten::view", "aten::neg", "magi::all_gather_start", "magi::wait",
                                      "aten::mm", "aten::add.Tensor"}));
  // A backend that declines the view cuts there anyway: the group stays.
  EXPECT_EQ(OpsAfterPassWith(body, [](const Node& node) { return node.op() == "aten::view"; }),
            (std::vector<std::string>{"aten::exp", "aten::view", "magi::all_gather_start", "magi::wait", "aten::neg",
                                      "aten::mm", "aten::add.Tensor"}));
}

TEST(AlignCollectivesTest, ADeclinedCastApartFromItsCollectiveIsPickedUpInOnePass) {
  // The cast feeds only the reduce-scatter but sits one node above it: the group moves up
  // beside it (a declined node: a tie with the graph's end below, and a start goes up),
  // takes it in, and the grown group, which cannot pass the exp its cast reads, moves on
  // down to the end: exp, relu and neg are left as one fusible run.
  EXPECT_EQ(OpsAfterPassWith("%mm = aten::mm(%a, %a) : f32[4,4]\n    %z = aten::exp(%b) : f32[4]\n"
                             "    %c = aten::_to_copy(%z, dtype = dtype(f64)) : f64[4]\n"
                             "    %x = aten::relu(%z) : f32[4]\n"
                             "    %f = magi::reduce_scatter_start([%c], group = \"dp\", reduce_op = \"avg\") : future<f64[2]>\n"
                             "    %w = magi::wait(%f) : f64[2]\n"
                             "    %y = aten::neg(%x) : f32[4]",
                             [](const Node& node) { return node.op() == "aten::_to_copy"; }),
            (std::vector<std::string>{"aten::mm", "aten::exp", "aten::relu", "aten::neg", "aten::_to_copy",
                                      "magi::reduce_scatter_start", "magi::wait"}));
}

TEST(AlignCollectivesTest, MaxNodesBoundsTheMove) {
  // Five nodes to cross to reach the GEMM: max_nodes=4 leaves the group, 5 moves it.
  for (int max_nodes : {4, 5}) {
    absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kForwardBoundary);
    ASSERT_TRUE(module.ok()) << module.status();
    absl::StatusOr<bool> changed =
        RunPassPipeline(absl::StrCat("align-collectives{max_nodes=", max_nodes, "}"), **module);
    ASSERT_TRUE(changed.ok()) << changed.status();
    EXPECT_EQ(*changed, max_nodes == 5);
  }
}

TEST(AlignCollectivesTest, ExtraAnchorsCountAsBoundaries) {
  // With rsqrt declared an anchor (as a partition backend's declined node is), the wait
  // only moves up to it.
  int moves = 0;
  EXPECT_EQ(OpsOfModuleAfterPass(kForwardBoundary, [](const Node& node) { return node.op() == "aten::rsqrt"; }, &moves),
            (std::vector<std::string>{"aten::t", "aten::mm", "aten::add.Tensor", "aten::pow.Tensor_Scalar",
                                      "aten::mean.dim", "aten::rsqrt", "magi::all_gather_start", "magi::wait",
                                      "aten::mul.Tensor", "aten::mul.Tensor", "aten::t", "aten::mm"}));
  EXPECT_EQ(moves, 1);
}

TEST(AlignCollectivesTest, RejectsBadOptions) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kForwardBoundary);
  ASSERT_TRUE(module.ok());
  for (const char* spec : {"align-collectives{max_nodes=-1}", "align-collectives{max_nodes=x}",
                           "align-collectives{depth=2}"}) {
    absl::StatusOr<bool> changed = RunPassPipeline(spec, **module);
    ASSERT_FALSE(changed.ok()) << spec;
    EXPECT_NE(std::string(changed.status().message()).find("align-collectives"), std::string::npos)
        << changed.status();
  }
}

// The captured 4-layer Llama step (sharded for 2 ranks), with and without the overlap
// schedule, with the default anchors and with inductor's (it declines the casts feeding
// reductions and magi:: ops): the pass keeps every node and the collectives' order and is
// idempotent.
TEST(AlignCollectivesTest, LlamaStepKeepsNodesAndCollectiveOrder) {
  const ExtraAnchor inductor_like = [](const Node& node) {
    return node.op() == "aten::_to_copy" || node.op_namespace() == "magi";
  };
  for (const char* pipeline : {"", "bucket-collectives,schedule-overlap{prefetch=2}"}) {
   for (const ExtraAnchor& anchor : {ExtraAnchor(nullptr), inductor_like}) {
    SCOPED_TRACE(absl::StrCat(pipeline, anchor ? " inductor-like anchors" : ""));
    std::unique_ptr<Module> module = testing::LoadTestdata("llama4_fsdp_step.mir");
    ASSERT_NE(module, nullptr);
    if (*pipeline != '\0') testing::RunPipeline(*module, pipeline);
    Graph& graph = *module->FindGraph("train_step");
    auto snapshot = [&graph](bool communication) {
      std::vector<const Node*> nodes;
      for (const Node* node : graph.nodes()) {
        if (IsCommunication(node->op()) == communication) nodes.push_back(node);
      }
      return nodes;
    };
    // Per collective start: the compute nodes between it and its wait (what it overlaps).
    auto overlap = [&graph]() {
      std::vector<int> windows;
      std::vector<Node*> order = graph.nodes();
      for (size_t i = 0; i < order.size(); ++i) {
        if (!IsCollectiveStart(order[i]->op())) continue;
        int compute = 0;
        for (size_t j = i + 1; j < order.size(); ++j) {
          if (order[j]->op() == kWaitOp && order[j]->operand(0)->producer() == order[i]) break;
          compute += IsCommunication(order[j]->op()) ? 0 : 1;
        }
        windows.push_back(compute);
      }
      return windows;
    };
    const std::vector<const Node*> collectives = snapshot(true);
    const std::vector<int> windows = overlap();
    const int num_nodes = graph.num_nodes();
    const int moved = AlignCollectives(graph, AlignCollectivesPass::kDefaultMaxNodes, anchor);
    // Unscheduled, every start is right before its wait: those pairs move. Scheduled, no
    // collective may lose overlap (here none moves: the gathers' waits sit inside the norms
    // but their starts are a layer ahead).
    if (*pipeline == '\0') EXPECT_GT(moved, 0);
    const std::vector<int> after = overlap();
    ASSERT_EQ(after.size(), windows.size());
    for (size_t i = 0; i < windows.size(); ++i) EXPECT_GE(after[i], windows[i]) << "collective " << i;
    ASSERT_TRUE(VerifyModule(*module).ok());
    EXPECT_EQ(graph.num_nodes(), num_nodes);
    EXPECT_EQ(snapshot(true), collectives);
    const std::string once = PrintModule(*module);
    EXPECT_EQ(AlignCollectives(graph, AlignCollectivesPass::kDefaultMaxNodes, anchor), 0);
    EXPECT_EQ(PrintModule(*module), once);
   }
  }
}

}  // namespace
}  // namespace magi
