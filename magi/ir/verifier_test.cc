// The verifier accepts well-formed graphs and names the node, line and reason otherwise.
#include "magi/ir/verifier.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/collectives.h"
#include "magi/ir/parser.h"
#include "magi/ir/test_modules.h"

namespace magi {
namespace {

std::string VerifyText(absl::string_view text) {
  auto module = ParseModule(text);
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return "parse error";
  absl::Status status = VerifyModule(**module);
  if (status.ok()) return "ok";
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  return std::string(status.message());
}

TEST(VerifierTest, AcceptsSamples) {
  EXPECT_EQ(VerifyText(testing::kFsdpMlpStepText), "ok");
  EXPECT_EQ(VerifyText(testing::kTinyForwardText), "ok");
}

TEST(VerifierTest, MatmulShapesMustChain) {
  EXPECT_EQ(VerifyText(R"(module @m { graph @g {
    input %a: f32[4,8]
    input %b: f32[7,3]
    %c = aten::mm(%a, %b) : f32[4,3] {module = "proj"}
  } })"),
            "graph @g: aten::mm defining %c at line 4:10 in module 'proj': shapes do not chain: f32[4,8] x f32[7,3] -> "
            "f32[4,3]");
}

// Types built in code (the parser already refuses such text): a byte count that
// overflows int64 is an error naming the value and the node's line.
TEST(VerifierTest, SizesMustFitInt64) {
  Module module("m");
  Graph& g = *module.AddGraph("g");
  Value* x = g.AddInput("x", Type::Tensor({DType::kFloat32, {int64_t{1} << 62}}));
  Node* node = g.AddNode("aten::neg", {NodeArg(x)}, {Type::Tensor({DType::kFloat32, {3037000500, 3037000500}})});
  node->set_location({7, 5});
  absl::Status status = VerifyModule(module);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "graph @g: input %x: f32[4611686018427387904] is 18446744073709551616 bytes, more than int64 can hold (at "
            "most 9223372036854775807)\n"
            "graph @g: aten::neg defining %0 at line 7:5: result %0: f32[3037000500,3037000500] has more elements "
            "than int64 can count (at most 9223372036854775807)");
}

TEST(VerifierTest, KnownOpArity) {
  EXPECT_EQ(VerifyText(R"(module @m { graph @g {
    input %a: f32[4,8]
    %c = aten::addmm(%a, %a) : f32[4,8]
  } })"),
            "graph @g: aten::addmm defining %c at line 3:10: expects 3 tensor operands, got 2");
  EXPECT_EQ(VerifyText(R"(module @m { graph @g {
    input %a: f32[4,8]
    %c, %d = aten::relu(%a) : f32[4,8], f32[4,8]
  } })"),
            "graph @g: aten::relu defining %c at line 3:14: expects 1 results, got 2");
}

TEST(VerifierTest, UnknownMagiOp) {
  EXPECT_EQ(VerifyText("module @m { graph @g { input %a: f32[4]\n %c = magi::frobnicate(%a) : f32[4] } }"),
            "graph @g: magi::frobnicate defining %c at line 2:7: unknown op in the magi:: namespace");
}

TEST(VerifierTest, CollectiveGroupMustExist) {
  EXPECT_EQ(VerifyText(R"(module @m { graph @g {
    input %a: f32[4]
    %f = magi::all_reduce_start([%a], group = "tp", reduce_op = "sum") : future<f32[4]>
    %b = magi::wait(%f) : f32[4]
  } })"),
            "graph @g: magi::all_reduce_start defining %f at line 3:10: process group @tp does not exist");
}

TEST(VerifierTest, CollectiveResultTypeFollowsGroupSize) {
  EXPECT_EQ(VerifyText(R"(module @m {
  process_group @dp {axis = "dp", size = 4}
  graph @g {
    input %a: f32[4,2]
    %f = magi::all_gather_start([%a], group = "dp") : future<f32[8,2]>
    %b = magi::wait(%f) : f32[8,2]
  } })"),
            "graph @g: magi::all_gather_start defining %f at line 5:10: result %f should be future<f32[16,2]> over "
            "@dp (size 4), not future<f32[8,2]>");
  EXPECT_EQ(VerifyText(R"(module @m {
  process_group @dp {axis = "dp", size = 4}
  graph @g {
    input %a: f32[6]
    %f = magi::reduce_scatter_start([%a], group = "dp", reduce_op = "sum") : future<f32[1]>
    %b = magi::wait(%f) : f32[1]
  } })"),
            "graph @g: magi::reduce_scatter_start defining %f at line 5:10: input %a: dim 0 of f32[6] does not split "
            "evenly over 4 ranks");
}

TEST(VerifierTest, ReduceOpIsChecked) {
  EXPECT_EQ(VerifyText(R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %a: f32[4]
    %f = magi::all_reduce_start([%a], group = "dp", reduce_op = "xor") : future<f32[4]>
    %b = magi::wait(%f) : f32[4]
  } })"),
            "graph @g: magi::all_reduce_start defining %f at line 5:10: needs reduce_op = \"sum\", \"avg\", \"max\" or "
            "\"min\"");
}

TEST(VerifierTest, StartWithoutWait) {
  EXPECT_EQ(VerifyText(R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %a: f32[4]
    %f = magi::all_gather_start([%a], group = "dp") : future<f32[8]>
  } })"),
            "graph @g: magi::all_gather_start defining %f at line 5:10: future %f has 0 uses; it needs exactly one "
            "magi::wait");
}

TEST(VerifierTest, StartWithTwoWaits) {
  EXPECT_EQ(VerifyText(R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %a: f32[4]
    %f = magi::all_gather_start([%a], group = "dp") : future<f32[8]>
    %b = magi::wait(%f) : f32[8]
    %c = magi::wait(%f) : f32[8]
  } })"),
            "graph @g: magi::all_gather_start defining %f at line 5:10: future %f has 2 uses; it needs exactly one "
            "magi::wait");
}

TEST(VerifierTest, FuturesOnlyFlowIntoWait) {
  EXPECT_EQ(VerifyText(R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %a: f32[4]
    %f = magi::all_gather_start([%a], group = "dp") : future<f32[8]>
    %b = aten::relu(%f) : f32[8]
  } })"),
            "graph @g: magi::all_gather_start defining %f at line 5:10: its futures must all be consumed, in order, "
            "by one magi::wait\ngraph @g: aten::relu defining %b at line 6:10: future %f may only be consumed by "
            "magi::wait");
}

TEST(VerifierTest, BucketWaitMustTakeAllFuturesInOrder) {
  EXPECT_EQ(VerifyText(R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %a: f32[4]
    input %b: f32[2]
    %f, %h = magi::all_gather_start([%a, %b], group = "dp") : future<f32[8]>, future<f32[4]>
    %y, %x = magi::wait(%h, %f) : f32[4], f32[8]
  } })"),
            "graph @g: magi::all_gather_start defining %f at line 6:14: its futures must all be consumed, in order, "
            "by one magi::wait\ngraph @g: magi::wait defining %y at line 7:14: operands must be all futures of one "
            "start, in order");
}

TEST(VerifierTest, WaitResultTypeMustMatch) {
  EXPECT_EQ(VerifyText(R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %a: f32[4]
    %f = magi::all_gather_start([%a], group = "dp") : future<f32[8]>
    %b = magi::wait(%f) : bf16[8]
  } })"),
            "graph @g: magi::wait defining %b at line 6:10: result %b should be f32[8], not bf16[8]");
}

TEST(VerifierTest, FutureOutputsAndInputsAreRejected) {
  EXPECT_EQ(VerifyText(R"(module @m { graph @g {
    input %a: future<f32[4]>
    output a = %a
  } })"),
            "graph @g: input %a is a future\ngraph @g: output 'a' is a future; wait for it first");
}

TEST(VerifierTest, UseBeforeDefinitionAfterReordering) {
  auto module = ParseModule(testing::kTinyForwardText);
  ASSERT_TRUE(module.ok());
  Graph* graph = (*module)->FindGraph("forward");
  Node* relu = graph->FindValue("z")->producer();
  Node* addmm = graph->FindValue("y")->producer();
  graph->MoveBefore(relu, addmm);
  absl::Status status = VerifyModule(**module);
  EXPECT_EQ(status.message(),
            "graph @forward: aten::relu defining %z at line 7:10 in module 'act': operand %y is used before it is "
            "defined");
}

TEST(VerifierTest, ReportsAtMostTwentyProblems) {
  std::string text = "module @m { graph @g { input %a: f32[4]\n";
  for (int i = 0; i < 25; ++i) text += "%c" + std::to_string(i) + " = magi::nope(%a) : f32[4]\n";
  text += "} }";
  std::string message = VerifyText(text);
  EXPECT_NE(message.find("... and 5 more"), std::string::npos) << message;
}

TEST(VerifierTest, BuiltCollectivesVerify) {
  Module module("m");
  const ProcessGroup* dp = module.AddProcessGroup({"dp", "dp", 2, {}});
  Graph* graph = module.AddGraph("g");
  Value* shard = graph->AddInput("w.shard", Type::Tensor({DType::kBFloat16, {3, 4}}), InputRole::kParam);
  absl::StatusOr<Node*> start = AddCollectiveStart(*graph, CollectiveKind::kAllGather, {shard}, *dp);
  ASSERT_TRUE(start.ok()) << start.status();
  Node* wait = AddWait(*graph, *start);
  EXPECT_EQ(wait->result(0)->type().ToString(), "bf16[6,4]");
  EXPECT_EQ(StartOfWait(*wait), *start);
  graph->AddOutput("w", wait->result(0));
  EXPECT_TRUE(VerifyModule(module).ok()) << VerifyModule(module);

  absl::StatusOr<Node*> bad = AddCollectiveStart(*graph, CollectiveKind::kReduceScatter, {shard}, *dp, "sum");
  EXPECT_EQ(bad.status().message(), "%w.shard: dim 0 of bf16[3,4] does not split evenly over 2 ranks");
  absl::StatusOr<Node*> bad_op = AddCollectiveStart(*graph, CollectiveKind::kAllReduce, {shard}, *dp, "xor");
  EXPECT_EQ(bad_op.status().message(), "unknown reduce_op 'xor'");
}

// Donation: an output may alias a graph input of its own type, one output per input,
// and no other output may hand the donated input back.
TEST(VerifierTest, DonatedInputs) {
  EXPECT_EQ(VerifyText(R"(module @m { graph @g {
    input %p: f32[4] {role = param}
    input %g: f32[4]
    %p2 = aten::sub.Tensor(%p, %g, 1) : f32[4]
    output p = %p2 {aliases = %p}
  } })"),
            "ok");
  EXPECT_EQ(VerifyText(R"(module @m { graph @g {
    input %p: f32[4] {role = param}
    %p2 = aten::sum(%p, none) : f32[]
    output p = %p2 {aliases = %p}
  } })"),
            "graph @g: output 'p' aliases %p of another type (f32[4] vs f32[])");
  EXPECT_EQ(VerifyText(R"(module @m { graph @g {
    input %p: f32[4] {role = param}
    %a = aten::neg(%p) : f32[4]
    %b = aten::neg(%a) : f32[4]
    output a = %a {aliases = %p}
    output b = %b {aliases = %p}
  } })"),
            "graph @g: output 'b' aliases %p, which is already donated to output 'a'");
  EXPECT_EQ(VerifyText(R"(module @m { graph @g {
    input %p: f32[4] {role = param}
    %a = aten::neg(%p) : f32[4]
    output a = %a {aliases = %p}
    output old = %p
  } })"),
            "graph @g: output 'old' returns %p, which is donated to output 'a'");
}

// magi::local_shard: this rank's rows of a tensor over a group (dim 0 divided by its size).
TEST(VerifierTest, LocalShard) {
  constexpr absl::string_view kHead = R"(module @m {
  process_group @pf {axis = "dp.pf", size = 2}
  graph @g {
    input %w: f32[6,4]
)";
  EXPECT_EQ(VerifyText(absl::StrCat(kHead, R"(    %p = magi::local_shard(%w, group = "pf") : f32[3,4]
  } })")),
            "ok");
  EXPECT_EQ(VerifyText(absl::StrCat(kHead, R"(    %p = magi::local_shard(%w, group = "pf") : f32[6,4]
  } })")),
            "graph @g: magi::local_shard defining %p at line 5:10: result %p should be f32[3,4] over @pf (size 2), not "
            "f32[6,4]");
  EXPECT_EQ(VerifyText(absl::StrCat(kHead, R"(    %p = magi::local_shard(%w, group = "tp") : f32[3,4]
  } })")),
            "graph @g: magi::local_shard defining %p at line 5:10: process group @tp does not exist");
  EXPECT_EQ(VerifyText(R"(module @m {
  process_group @pf {axis = "dp.pf", size = 4}
  graph @g {
    input %w: f32[6,4]
    %p = magi::local_shard(%w, group = "pf") : f32[1,4]
  } })"),
            "graph @g: magi::local_shard defining %p at line 5:10: %w over @pf: f32[6,4] has no static dim 0 divisible "
            "by 4");
}

}  // namespace
}  // namespace magi
