#include "magi/analysis/op_traits.h"

#include "gtest/gtest.h"

namespace magi {
namespace {

TEST(OpTraitsTest, SplitsOpNames) {
  OpNameParts parts = SplitOpName("aten::add.Tensor");
  EXPECT_EQ(parts.ns, "aten");
  EXPECT_EQ(parts.name, "add");
  EXPECT_EQ(parts.overload, "Tensor");
  parts = SplitOpName("magi::wait");
  EXPECT_EQ(parts.ns, "magi");
  EXPECT_EQ(parts.name, "wait");
  EXPECT_EQ(parts.overload, "");
  parts = SplitOpName("relu");
  EXPECT_EQ(parts.ns, "");
  EXPECT_EQ(parts.name, "relu");
}

TEST(OpTraitsTest, ViewsAliasOperandZero) {
  for (const char* op : {"aten::transpose.int", "aten::slice.Tensor", "aten::t", "aten::view", "aten::expand"}) {
    OpTraits traits = GetOpTraits(op);
    EXPECT_TRUE(traits.view) << op;
    EXPECT_EQ(traits.alias_operand, 0) << op;
    EXPECT_TRUE(traits.movable()) << op;
  }
  EXPECT_FALSE(IsViewOp("aten::clone"));
  EXPECT_FALSE(IsViewOp("aten::tanh"));
  EXPECT_EQ(GetOpTraits("aten::clone").alias_operand, -1);
}

TEST(OpTraitsTest, SideEffectsFromRowsAndNamingConventions) {
  for (const char* op : {"aten::add_.Tensor", "aten::copy_", "aten::_foreach_add_.Scalar", "aten::mm.out",
                         "aten::add.out_dtype", "aten::native_batch_norm", "aten::__iand__.Tensor"}) {
    EXPECT_TRUE(GetOpTraits(op).side_effects) << op;
    EXPECT_FALSE(GetOpTraits(op).movable()) << op;
  }
  EXPECT_TRUE(GetOpTraits("aten::add_.Tensor").in_place);
  EXPECT_EQ(GetOpTraits("aten::add_.Tensor").alias_operand, 0);
  for (const char* op : {"aten::_log_softmax", "aten::add.Tensor", "magi::wait", "aten::_to_copy",
                         "aten::__and__.Tensor", "aten::__or__.Tensor", "aten::outer"}) {
    EXPECT_FALSE(GetOpTraits(op).side_effects) << op;
  }
}

TEST(OpTraitsTest, RandomOps) {
  for (const char* op : {"aten::bernoulli.p", "aten::native_dropout", "aten::randn", "aten::randperm",
                         "aten::normal_", "aten::rrelu_with_noise"}) {
    EXPECT_TRUE(GetOpTraits(op).random) << op;
    EXPECT_FALSE(GetOpTraits(op).movable()) << op;
  }
  // Deterministic ops whose names contain a random op's name.
  for (const char* op : {"aten::native_dropout_backward", "aten::poisson_nll_loss", "aten::native_layer_norm",
                         "aten::rrelu_with_noise_backward"}) {
    EXPECT_FALSE(GetOpTraits(op).random) << op;
  }
}

TEST(OpTraitsTest, MatmulKinds) {
  EXPECT_EQ(GetOpTraits("aten::mm").matmul, MatmulKind::kMatmul);
  EXPECT_EQ(GetOpTraits("aten::mm.out").matmul, MatmulKind::kMatmul);
  EXPECT_EQ(GetOpTraits("aten::addmm").matrix_operand, 1);
  EXPECT_EQ(GetOpTraits("aten::bmm").matrix_operand, -1);
  EXPECT_EQ(GetOpTraits("aten::conv3d").matmul, MatmulKind::kConvolution);
  EXPECT_TRUE(GetOpTraits("aten::convolution_backward").backward);
  EXPECT_EQ(GetOpTraits("aten::_scaled_dot_product_flash_attention").matmul, MatmulKind::kAttention);
  EXPECT_TRUE(GetOpTraits("aten::_efficient_attention_backward").backward);
  EXPECT_FALSE(GetOpTraits("aten::_native_multi_head_attention").matmul_like());
  EXPECT_FALSE(GetOpTraits("aten::add.Tensor").matmul_like());
  EXPECT_FALSE(GetOpTraits("foo::mm").matmul_like());  // rows are per namespace
}

TEST(OpTraitsTest, CommunicationDataDependenceAndElementwise) {
  EXPECT_TRUE(GetOpTraits("magi::all_gather_start").communication);
  EXPECT_TRUE(GetOpTraits("magi::wait").communication);
  EXPECT_FALSE(GetOpTraits("magi::wait").movable());
  EXPECT_TRUE(GetOpTraits("aten::_local_scalar_dense").data_dependent);
  EXPECT_TRUE(GetOpTraits("aten::nonzero").data_dependent);
  EXPECT_FALSE(GetOpTraits("aten::mm").data_dependent);
  EXPECT_TRUE(GetOpTraits("aten::add.Tensor").elementwise);
  EXPECT_TRUE(GetOpTraits("aten::gelu_backward").elementwise);
  EXPECT_FALSE(GetOpTraits("aten::sum").elementwise);
}

TEST(OpTraitsTest, UninitializedResults) {
  for (const char* op : {"aten::empty.memory_format", "aten::empty_like", "aten::empty_strided", "aten::new_empty",
                         "aten::new_empty_strided", "aten::empty_permuted"}) {
    EXPECT_TRUE(GetOpTraits(op).uninitialized) << op;
    EXPECT_TRUE(GetOpTraits(op).movable()) << op;
  }
  EXPECT_FALSE(GetOpTraits("aten::zeros").uninitialized);
  EXPECT_FALSE(GetOpTraits("aten::new_zeros").uninitialized);
}

TEST(OpTraitsTest, UnknownOpsGetOnlyTheNamingConventions) {
  OpTraits traits = GetOpTraits("aten::no_such_op");
  EXPECT_FALSE(traits.known);
  EXPECT_TRUE(traits.movable());
  EXPECT_FALSE(traits.view);
  EXPECT_TRUE(GetOpTraits("aten::relu").known);
  EXPECT_TRUE(GetOpTraits("mylib::frob_").in_place);
}

}  // namespace
}  // namespace magi
