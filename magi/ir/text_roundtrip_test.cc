// The text format round-trips exactly: parse(print(m)) prints the same text, and the
// canonical samples print back byte for byte.
#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/parser.h"
#include "magi/ir/printer.h"
#include "magi/ir/test_modules.h"
#include "magi/ir/verifier.h"

namespace magi {
namespace {

void ExpectExactRoundTrip(absl::string_view text) {
  auto module = ParseModule(text);
  ASSERT_TRUE(module.ok()) << module.status();
  std::string printed = PrintModule(**module);
  EXPECT_EQ(printed, text);
  auto reparsed = ParseModule(printed);
  ASSERT_TRUE(reparsed.ok()) << reparsed.status();
  EXPECT_EQ(PrintModule(**reparsed), printed);
}

TEST(TextRoundTripTest, FsdpMlpStepPrintsBackByteForByte) { ExpectExactRoundTrip(testing::kFsdpMlpStepText); }

TEST(TextRoundTripTest, TinyForwardPrintsBackByteForByte) { ExpectExactRoundTrip(testing::kTinyForwardText); }

TEST(TextRoundTripTest, DonatedInputsPrintBack) {
  ExpectExactRoundTrip(R"(module @m {
  graph @g {
    input %p: f32[4] {role = param}
    input %g: f32[4]
    %p2 = aten::sub.Tensor(%p, %g, 1) : f32[4]
    output p = %p2 {aliases = %p}
  }
}
)");
  auto bad = ParseModule(R"(module @m { graph @g {
    input %p: f32[4]
    %q = aten::neg(%p) : f32[4]
    output p = %q {aliases = %q}
  } })");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "<text>:4:30: output 'p' aliases %q, which is not a graph input");
}

TEST(TextRoundTripTest, SamplesVerify) {
  for (absl::string_view text : {testing::kFsdpMlpStepText, testing::kTinyForwardText}) {
    auto module = ParseModule(text);
    ASSERT_TRUE(module.ok()) << module.status();
    EXPECT_TRUE(VerifyModule(**module).ok()) << VerifyModule(**module);
  }
}

TEST(TextRoundTripTest, ParsedStructureMatchesText) {
  auto module = ParseModule(testing::kFsdpMlpStepText);
  ASSERT_TRUE(module.ok()) << module.status();
  const Graph* graph = (*module)->FindGraph("train_step");
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(graph->inputs().size(), 5u);
  EXPECT_EQ(graph->inputs()[2]->role(), InputRole::kParam);
  const Value* h = graph->FindValue("h");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->producer()->op(), "aten::mm");
  EXPECT_EQ(h->producer()->annotations().module_path, "fc1");
  EXPECT_EQ(h->producer()->annotations().schedule, 3);
  EXPECT_EQ(h->producer()->location().line, 12);
  EXPECT_EQ(h->producer()->location().column, 10);
  const Value* w1t = graph->FindValue("w1t");
  EXPECT_EQ(w1t->type().tensor().strides, (std::vector<int64_t>{1, 16}));
  EXPECT_FALSE(w1t->type().tensor().IsContiguous());
  const Node* gelu = graph->FindValue("a")->producer();
  EXPECT_EQ(gelu->annotations().remat, RematDecision::kRecompute);
  ASSERT_NE(gelu->FindArg("approximate"), nullptr);
  EXPECT_EQ(gelu->FindArg("approximate")->as_string(), "tanh");
  const Node* index = graph->FindValue("idx")->producer();
  EXPECT_EQ(index->args()[1].value.as_operand_list().indices[0], OperandListRef::kNoOperand);
  const Node* weights = graph->FindValue("ws")->producer();
  EXPECT_EQ(weights->FindArg("name")->as_string(), "quote\"and\\slash\n");
  EXPECT_EQ(weights->FindArg("flags")->as_bool_list(), (std::vector<bool>{true, false}));
  EXPECT_EQ(weights->result(0)->type().tensor().device, (Device{DeviceType::kCuda, 1}));
  EXPECT_EQ(graph->outputs().back().name, "odd name");
  EXPECT_EQ((*module)->FindProcessGroup("dp")->ranks, (std::vector<int64_t>{0, 1}));
}

TEST(TextRoundTripTest, FloatsKeepEveryBit) {
  constexpr absl::string_view kText = R"(module @m {
  graph @g {
    input %x: f32[2]
    %y = aten::mul.Scalar(%x, 0.10000000000000001) : f32[2]
    %z = aten::add.Scalar(%y, 1e-300, alpha = 3.0) : f32[2]
    %n = aten::nan_to_num(%z, nan, inf, -inf) : f32[2]
    output y = %n
  }
}
)";
  auto module = ParseModule(kText);
  ASSERT_TRUE(module.ok()) << module.status();
  const Node* mul = (*module)->FindGraph("g")->FindValue("y")->producer();
  EXPECT_EQ(mul->args()[1].value.as_float(), 0.1);
  std::string printed = PrintModule(**module);
  EXPECT_NE(printed.find("aten::mul.Scalar(%x, 0.1)"), std::string::npos) << printed;
  auto reparsed = ParseModule(printed);
  ASSERT_TRUE(reparsed.ok());
  EXPECT_EQ(PrintModule(**reparsed), printed);
}

TEST(TextRoundTripTest, EmptyAndUnusualNamesAreQuoted) {
  ExpectExactRoundTrip("module @\"\" {\n  graph @\"my graph\" {\n    input %\"a b\": f32[1]\n    output \"\" = %\"a b\"\n  }\n}\n");
}

TEST(TextRoundTripTest, CommentsAndWhitespaceAreIgnored) {
  auto module = ParseModule(
      "// a comment\nmodule @m{graph @g{input %x:f32[?,3] // trailing\n%y=aten::relu(%x):f32[?,3] output y=%y}}");
  ASSERT_TRUE(module.ok()) << module.status();
  EXPECT_EQ(PrintModule(**module),
            "module @m {\n  graph @g {\n    input %x: f32[?,3]\n    %y = aten::relu(%x) : f32[?,3]\n"
            "    output y = %y\n  }\n}\n");
}

}  // namespace
}  // namespace magi
