#include "magi/compat/torch_compat.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"

namespace magi::compat {
namespace {

c10::OperatorHandle Op(const char* name, const char* overload) {
  auto op = c10::Dispatcher::singleton().findSchema({name, overload});
  EXPECT_TRUE(op.has_value()) << name;
  return *op;
}

TEST(TorchCompatTest, ClassifiesSchemaArguments) {
  const c10::FunctionSchema& sum = Op("aten::sum", "dim_IntList").schema();
  EXPECT_EQ(ClassifyArgument(sum.arguments()[0]).kind, ArgKind::kTensor);
  EXPECT_EQ(ClassifyArgument(sum.arguments()[1]).kind, ArgKind::kIntList);
  EXPECT_EQ(ClassifyArgument(sum.arguments()[2]).kind, ArgKind::kBool);
  ArgType dtype = ClassifyArgument(sum.arguments()[3]);
  EXPECT_EQ(dtype.kind, ArgKind::kScalarType);
  EXPECT_TRUE(dtype.optional);
  const c10::FunctionSchema& index = Op("aten::index", "Tensor").schema();
  EXPECT_EQ(ClassifyArgument(index.arguments()[1]).kind, ArgKind::kOptionalTensorList);
  const c10::FunctionSchema& add = Op("aten::add", "Tensor").schema();
  EXPECT_EQ(ClassifyArgument(add.arguments()[2]).kind, ArgKind::kScalar);
  const c10::FunctionSchema& view = Op("aten::view", "").schema();
  EXPECT_EQ(ClassifyArgument(view.arguments()[1]).kind, ArgKind::kIntList);  // SymInt[] on 2.x
}

TEST(TorchCompatTest, TypesRoundTrip) {
  for (DType d : {DType::kFloat32, DType::kBFloat16, DType::kInt64, DType::kBool, DType::kComplex64,
                  DType::kComplex128, DType::kComplex32}) {
    EXPECT_EQ(*FromScalarType(*ToScalarType(d)), d);
  }
  EXPECT_EQ(TensorTypeOf(at::zeros({2}, at::kComplexHalf))->ToString(), "c32[2]");
#if MAGI_TORCH_HAS_UINT64
  EXPECT_EQ(*FromScalarType(*ToScalarType(DType::kUInt64)), DType::kUInt64);
  EXPECT_EQ(TensorTypeOf(at::zeros({2}, at::kUInt64))->ToString(), "u64[2]");
#else
  EXPECT_EQ(ToScalarType(DType::kUInt64).status().message(), "dtype u64 needs LibTorch 2.3 or later; this is 1.13");
#endif
  EXPECT_EQ(FromScalarType(c10::ScalarType::QInt8).status().code(), absl::StatusCode::kUnimplemented);
  at::Tensor t = at::zeros({2, 3}).t();
  absl::StatusOr<TensorType> type = TensorTypeOf(t);
  ASSERT_TRUE(type.ok());
  EXPECT_EQ(type->ToString(), "f32[3,2]strides[1,3]");
  Device cuda{DeviceType::kCuda, 0};
  EXPECT_EQ(TensorTypeOf(at::zeros({4}, at::kBFloat16), &cuda)->ToString(), "bf16[4]@cuda:0");
}

TEST(TorchCompatTest, KnowsWhichOpsAutogradDecomposes) {
  c10::DispatchKeySet cpu(c10::DispatchKey::CPU);
  // dropout and linear run CompositeImplicitAutograd kernels on dense CPU tensors (1.13
  // also registers an Autograd kernel for linear and matmul, used only for nested tensors);
  // addmm and mm have derivative formulas.
  EXPECT_TRUE(DecomposesAtAutograd(Op("aten::dropout", ""), cpu));
  EXPECT_TRUE(DecomposesAtAutograd(Op("aten::linear", ""), cpu));
  EXPECT_TRUE(DecomposesAtAutograd(Op("aten::matmul", ""), cpu));
  EXPECT_FALSE(DecomposesAtAutograd(Op("aten::addmm", ""), cpu));
  EXPECT_FALSE(DecomposesAtAutograd(Op("aten::mm", ""), cpu));
}

TEST(TorchCompatTest, WhereRunsOnMeta) {
  auto meta = at::TensorOptions().device(c10::kMeta);
  at::Tensor out = at::where(at::empty({4, 1}, meta.dtype(at::kBool)), at::empty({1, 3}, meta),
                             at::empty({4, 3}, meta.dtype(at::kDouble)));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(out.scalar_type(), at::kDouble);
  at::Tensor into = at::empty({0}, meta);
  at::where_out(into, at::empty({4, 1}, meta.dtype(at::kBool)), at::empty({1, 3}, meta), at::empty({4, 3}, meta));
  EXPECT_EQ(into.sizes(), (std::vector<int64_t>{4, 3}));
}

TEST(TorchCompatTest, EmbeddingRunsOnMetaBothWays) {
  at::Tensor table = at::empty({100, 8}, at::TensorOptions().device(c10::kMeta));
  at::Tensor ids = at::empty({4, 5}, at::TensorOptions().dtype(at::kLong).device(c10::kMeta));
  at::Tensor out = at::embedding(table, ids);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{4, 5, 8}));
  EXPECT_TRUE(out.is_meta());
  at::Tensor grad = at::embedding_dense_backward(at::empty({4, 5, 8}, table.options()), ids, 100, -1, false);
  EXPECT_EQ(grad.sizes(), (std::vector<int64_t>{100, 8}));
  EXPECT_TRUE(grad.is_meta());
}

}  // namespace
}  // namespace magi::compat
