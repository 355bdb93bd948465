// Building and editing graphs through the C++ API: ownership, use lists, replacement.
#include <limits>

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/graph.h"
#include "magi/ir/module.h"
#include "magi/ir/printer.h"
#include "magi/ir/verifier.h"

namespace magi {
namespace {

TensorType F32(std::vector<int64_t> sizes) { return TensorType{DType::kFloat32, std::move(sizes)}; }

TEST(TypesTest, NamesAndSizes) {
  TensorType t{DType::kBFloat16, {8, 4096}};
  EXPECT_EQ(t.ToString(), "bf16[8,4096]");
  EXPECT_EQ(*t.SizeInBytes(), 8 * 4096 * 2);
  EXPECT_EQ(Type::Future(t).ToString(), "future<bf16[8,4096]>");
  TensorType dynamic{DType::kInt64, {kDynamicDim, 3}};
  EXPECT_EQ(dynamic.ToString(), "i64[?,3]");
  EXPECT_FALSE(dynamic.NumElements().has_value());
  TensorType strided{DType::kFloat32, {2, 3}, {1, 2}, {DeviceType::kCuda, 0}};
  EXPECT_EQ(strided.ToString(), "f32[2,3]strides[1,2]@cuda:0");
  EXPECT_FALSE(strided.IsContiguous());
  EXPECT_TRUE((TensorType{DType::kFloat32, {2, 3}, {3, 1}}).IsContiguous());
  EXPECT_EQ(ContiguousStrides({2, 3, 4}), (std::vector<int64_t>{12, 4, 1}));
  for (DType d : {DType::kFloat32, DType::kBFloat16, DType::kInt64, DType::kBool, DType::kComplex128, DType::kUInt64,
                  DType::kComplex32}) {
    EXPECT_EQ(ParseDType(DTypeName(d)), d);
  }
  EXPECT_FALSE(ParseDType("float").has_value());
  EXPECT_EQ(TorchDTypeName(DType::kBFloat16), "bfloat16");
  EXPECT_EQ(TorchDTypeName(DType::kUInt8), "uint8");
  EXPECT_EQ(TorchDTypeName(DType::kComplex32), "complex32");
  EXPECT_EQ(Device::Parse("cuda:3")->index, 3);
  EXPECT_EQ(Device::Parse("cuda:x").status().message(), "unknown device 'cuda:x' (expected cpu, meta, cuda or cuda:N)");
}

// f32[2^62] is 2^64 bytes: it used to wrap to 0 bytes.
TEST(TypesTest, SizesThatOverflowInt64AreNotWrapped) {
  TensorType huge{DType::kFloat32, {int64_t{1} << 62}};
  EXPECT_EQ(huge.NumElements(), int64_t{1} << 62);
  EXPECT_EQ(huge.SizeInBytes(), std::nullopt);
  EXPECT_EQ(huge.CheckedSizeInBytes().status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(huge.CheckedSizeInBytes().status().message(),
            "f32[4611686018427387904] is 18446744073709551616 bytes, more than int64 can hold (at most "
            "9223372036854775807)");
  TensorType square{DType::kFloat32, {3037000500, 3037000500}};  // 9.22e18 elements > INT64_MAX
  EXPECT_EQ(square.NumElements(), std::nullopt);
  EXPECT_EQ(square.CheckedSizeInBytes().status().message(),
            "f32[3037000500,3037000500] has more elements than int64 can count (at most 9223372036854775807)");
  EXPECT_EQ(ContiguousStrides({2, 3037000500, 3037000500}),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::max(), 3037000500, 1}));
  EXPECT_EQ((TensorType{DType::kInt64, {kDynamicDim}}).CheckedSizeInBytes().status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((TensorType{DType::kFloat64, {1 << 20, 1 << 20}}).CheckedSizeInBytes().value(), int64_t{8} << 40);
}

TEST(NamesTest, OpAndArgumentNames) {
  EXPECT_TRUE(IsValidOpName("aten::add.Tensor"));
  EXPECT_TRUE(IsValidOpName("magi::wait"));
  EXPECT_TRUE(IsValidOpName("a::b::c"));
  EXPECT_FALSE(IsValidOpName("relu"));
  EXPECT_FALSE(IsValidOpName("aten::"));
  EXPECT_FALSE(IsValidOpName("aten::ones_li]e"));
  EXPECT_FALSE(IsValidOpName("::mm"));
  EXPECT_FALSE(IsValidOpName("aten:mm"));
  EXPECT_TRUE(IsValidArgumentName("memory_format"));
  EXPECT_FALSE(IsValidArgumentName("a.b"));
  EXPECT_FALSE(IsValidArgumentName("1x"));
}

TEST(AttributeTest, PrintsEveryKind) {
  EXPECT_EQ(Attribute().ToString(), "none");
  EXPECT_EQ(Attribute(true).ToString(), "true");
  EXPECT_EQ(Attribute(int64_t{-3}).ToString(), "-3");
  EXPECT_EQ(Attribute(2.0).ToString(), "2.0");
  EXPECT_EQ(Attribute(1e-5).ToString(), "1e-05");
  EXPECT_EQ(Attribute("a\"b").ToString(), "\"a\\\"b\"");
  EXPECT_EQ(Attribute(std::vector<int64_t>{0, 1}).ToString(), "[0, 1]");
  EXPECT_EQ(Attribute(std::vector<double>{0.5}).ToString(), "[0.5]");
  EXPECT_EQ(Attribute(DType::kBFloat16).ToString(), "dtype(bf16)");
  EXPECT_EQ(Attribute(Device{DeviceType::kCuda, 1}).ToString(), "device(cuda:1)");
  EXPECT_EQ(Attribute(OperandListRef{{0, OperandListRef::kNoOperand}}).ToString(), "[$0, none]");
}

class GraphTest : public ::testing::Test {
 protected:
  GraphTest() : module_("m"), graph_(module_.AddGraph("g")) {
    x_ = graph_->AddInput("x", Type::Tensor(F32({4, 8})));
    w_ = graph_->AddInput("w", Type::Tensor(F32({8, 2})), InputRole::kParam);
    mm_ = graph_->AddNode("aten::mm", {NodeArg(x_), NodeArg(w_)}, {Type::Tensor(F32({4, 2}))});
    relu_ = graph_->AddNode("aten::relu", {NodeArg(mm_->result(0))}, {Type::Tensor(F32({4, 2}))});
    graph_->AddOutput("y", relu_->result(0));
  }

  Module module_;
  Graph* graph_;
  Value* x_;
  Value* w_;
  Node* mm_;
  Node* relu_;
};

TEST_F(GraphTest, TracksUses) {
  EXPECT_EQ(mm_->result(0)->name(), "0");
  EXPECT_EQ(relu_->result(0)->name(), "1");
  ASSERT_EQ(x_->uses().size(), 1u);
  EXPECT_EQ(x_->uses()[0].user, mm_);
  EXPECT_EQ(x_->uses()[0].operand_index, 0);
  EXPECT_EQ(mm_->result(0)->Users(), std::vector<Node*>{relu_});
  EXPECT_EQ(mm_->result(0)->producer(), mm_);
  EXPECT_TRUE(x_->is_graph_input());
  EXPECT_EQ(graph_->FindValue("w"), w_);
  EXPECT_EQ(graph_->FindValue("nope"), nullptr);
  EXPECT_TRUE(VerifyModule(module_).ok());
}

TEST_F(GraphTest, ReplaceAllUsesWithUpdatesUsesAndOutputs) {
  Node* gelu = graph_->AddNode("aten::gelu", {NodeArg(mm_->result(0))}, {Type::Tensor(F32({4, 2}))});
  graph_->ReplaceAllUsesWith(relu_->result(0), gelu->result(0));
  EXPECT_EQ(graph_->outputs()[0].value, gelu->result(0));
  graph_->EraseNode(relu_);
  EXPECT_EQ(mm_->result(0)->uses().size(), 1u);
  EXPECT_EQ(mm_->result(0)->uses()[0].user, gelu);
  EXPECT_EQ(graph_->FindValue("1"), nullptr);
  EXPECT_EQ(PrintGraph(*graph_),
            "  graph @g {\n    input %x: f32[4,8]\n    input %w: f32[8,2] {role = param}\n"
            "    %0 = aten::mm(%x, %w) : f32[4,2]\n    %2 = aten::gelu(%0) : f32[4,2]\n    output y = %2\n  }\n");
}

TEST_F(GraphTest, ReplaceOperandKeepsUseListsExact) {
  mm_->ReplaceOperand(1, x_);  // both operands now read %x
  EXPECT_EQ(x_->uses().size(), 2u);
  EXPECT_FALSE(w_->has_uses());
  EXPECT_EQ(x_->Users(), std::vector<Node*>{mm_});
}

TEST_F(GraphTest, InsertBeforeAndMove) {
  Node* neg = graph_->AddNode("aten::neg", {NodeArg(x_)}, {Type::Tensor(F32({4, 8}))}, mm_, {"negx"});
  EXPECT_EQ(graph_->nodes().front(), neg);
  graph_->MoveBefore(neg, nullptr);
  EXPECT_EQ(graph_->nodes().back(), neg);
  std::string fresh = graph_->FreshName("negx");
  EXPECT_EQ(fresh.substr(0, 4), "negx");
  EXPECT_EQ(graph_->FindValue(fresh), nullptr);
}

TEST_F(GraphTest, ListAndKeywordArguments) {
  Node* cat = graph_->AddNode("aten::cat", {NodeArg(std::vector<Value*>{x_, nullptr, x_}), NodeArg(Attribute(0), "dim")},
                              {Type::Tensor(F32({8, 8}))});
  EXPECT_EQ(cat->num_operands(), 2);
  EXPECT_EQ(cat->ArgOperands(0), (std::vector<Value*>{x_, x_}));
  EXPECT_EQ(cat->FindArg("dim")->as_int(), 0);
  EXPECT_EQ(PrintNode(*cat), "%2 = aten::cat([%x, none, %x], dim = 0) : f32[8,8]");
}

TEST_F(GraphTest, AnnotationsPrintInFixedOrder) {
  NodeAnnotations& a = mm_->mutable_annotations();
  a.bucket = 2;
  a.remat = RematDecision::kSave;
  a.schedule = 7;
  a.stream = 1;
  a.module_path = "layers.3.mlp.up_proj";
  a.phase = Phase::kBackward;
  EXPECT_EQ(PrintNode(*mm_),
            "%0 = aten::mm(%x, %w) : f32[4,2] {module = \"layers.3.mlp.up_proj\", stream = 1, sched = 7, remat = "
            "save, bucket = 2, phase = bwd}");
}

TEST_F(GraphTest, EraseInputAndOutputs) {
  Value* unused = graph_->AddInput("unused", Type::Tensor(F32({1})));
  graph_->EraseInput(unused);
  EXPECT_EQ(graph_->FindValue("unused"), nullptr);
  EXPECT_EQ(graph_->inputs().size(), 2u);
  EXPECT_EQ(graph_->FindOutput("y"), 0);
  EXPECT_EQ(graph_->FindOutput("z"), -1);
  graph_->RemoveOutput(0);
  EXPECT_TRUE(graph_->outputs().empty());
  EXPECT_DEATH(graph_->EraseInput(x_), "erasing input %x that is still used");
}

TEST_F(GraphTest, QuotesUnusualNames) {
  graph_->AddInput("has space", Type::Tensor(F32({1})));
  EXPECT_NE(PrintGraph(*graph_).find("input %\"has space\": f32[1]"), std::string::npos);
}

TEST(ModuleTest, RemoveGraph) {
  Module module("m");
  module.AddGraph("a");
  Graph* b = module.AddGraph("b");
  EXPECT_TRUE(module.RemoveGraph("a"));
  EXPECT_FALSE(module.RemoveGraph("a"));
  EXPECT_EQ(module.FindGraph("a"), nullptr);
  ASSERT_EQ(module.graphs().size(), 1u);
  EXPECT_EQ(module.graphs()[0], b);
  module.AddGraph("a");  // the name is free again
  EXPECT_NE(module.FindGraph("a"), nullptr);
}

TEST(GraphDeathTest, ErasingAUsedNodeIsAProgrammerError) {
  Graph graph("g");
  Value* x = graph.AddInput("x", Type::Tensor(F32({1})));
  Node* a = graph.AddNode("aten::relu", {NodeArg(x)}, {Type::Tensor(F32({1}))});
  graph.AddNode("aten::relu", {NodeArg(a->result(0))}, {Type::Tensor(F32({1}))});
  EXPECT_DEATH(graph.EraseNode(a), "is still used");
  EXPECT_DEATH(graph.AddInput("x", Type::Tensor(F32({1}))), "value name %x is taken");
}

}  // namespace
}  // namespace magi
