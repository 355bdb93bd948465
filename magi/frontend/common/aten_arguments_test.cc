#include "magi/frontend/common/aten_arguments.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ATen.h>

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/base/status_macros.h"
#include "magi/frontend/common/functional_variants.h"
#include "magi/ir/printer.h"

namespace magi {
namespace {

c10::OperatorHandle Op(const char* name, const char* overload) {
  c10::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findSchema({name, overload});
  EXPECT_TRUE(op.has_value()) << name << "." << overload;
  return *op;
}

// Builds the node for `op` with `given` (nullopt: omitted) and prints the graph.
class ConvertTest : public ::testing::Test {
 protected:
  ConvertTest() : graph_("g") {
    x_ = graph_.AddInput("x", Type::Tensor({DType::kFloat32, {2, 3}}));
    y_ = graph_.AddInput("y", Type::Tensor({DType::kFloat32, {2, 3}}));
  }

  absl::StatusOr<std::vector<NodeArg>> Convert(const c10::OperatorHandle& op, std::vector<std::optional<AtenArg>> given,
                                               const c10::FunctionSchema* functional = nullptr) {
    return ConvertCallArguments(op.schema(), functional,
                                [&](size_t i) -> absl::StatusOr<std::optional<AtenArg>> {
                                  return i < given.size() ? given[i] : std::nullopt;
                                });
  }

  std::string Print(const std::string& op, std::vector<NodeArg> args, std::vector<int64_t> sizes) {
    Node* node = graph_.AddNode(op, std::move(args), {Type::Tensor({DType::kFloat32, std::move(sizes)})}, nullptr,
                                {"out"});
    return PrintNode(*node);
  }

  Graph graph_;
  Value* x_;
  Value* y_;
};

TEST_F(ConvertTest, OmittedArgumentsTakeDefaultsAndKeywordOnlyArgumentsAreNamed) {
  auto args = Convert(Op("aten::sum", "dim_IntList"), {AtenArg::Tensor(x_), AtenArg::List({AtenArg::Int(1)})});
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(Print("aten::sum.dim_IntList", *args, {2}),
            "%out = aten::sum.dim_IntList(%x, [1], false, dtype = none) : f32[2]");
}

TEST_F(ConvertTest, OutArgumentsAreDroppedForTheFunctionalVariant) {
  c10::OperatorHandle out = Op("aten::mul", "out");
  c10::optional<c10::OperatorHandle> functional = FindFunctionalVariant(out);
  ASSERT_TRUE(functional.has_value());
  auto args = Convert(out, {AtenArg::Tensor(x_), AtenArg::Tensor(y_), AtenArg::Tensor(x_)}, &functional->schema());
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(Print("aten::mul.Tensor", *args, {2, 3}), "%out = aten::mul.Tensor(%x, %y) : f32[2,3]");
}

TEST_F(ConvertTest, NumbersConvertToWhatTheSchemaWants) {
  // int[1] takes a bare int; a float argument takes an int; a Scalar keeps its kind.
  auto args = Convert(Op("aten::add", "Scalar"), {AtenArg::Tensor(x_), AtenArg::Float(2.5), AtenArg::Int(3)});
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(Print("aten::add.Scalar", *args, {2, 3}), "%out = aten::add.Scalar(%x, 2.5, 3) : f32[2,3]");
}

TEST_F(ConvertTest, ErrorsNameTheArgument) {
  auto bad_dim = Convert(Op("aten::sum", "dim_IntList"), {AtenArg::Tensor(x_), AtenArg::String("one")});
  EXPECT_EQ(bad_dim.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad_dim.status().message(), "argument 'dim': expected a list");
  auto bad_item = Convert(Op("aten::sum", "dim_IntList"),
                          {AtenArg::Tensor(x_), AtenArg::List({AtenArg::Float(1.5)})});
  EXPECT_EQ(bad_item.status().message(), "argument 'dim': expected a list of ints");
  auto none = Convert(Op("aten::sum", "dim_IntList"), {AtenArg::Tensor(x_), AtenArg::None(), AtenArg::None()});
  EXPECT_EQ(none.status().message(), "argument 'keepdim': None for a non-optional argument");
  auto number = Convert(Op("aten::add", "Tensor"), {AtenArg::Tensor(x_), AtenArg::Int(1)});
  EXPECT_EQ(number.status().message(), "argument 'other': a number where the schema wants a tensor");
  auto missing = Convert(Op("aten::add", "Tensor"), {AtenArg::Tensor(x_)});
  EXPECT_EQ(missing.status().message(), "argument 'other': missing and without a default");
  AtenArg complex;
  complex.kind = AtenArg::Kind::kComplex;
  complex.f = 1;
  complex.imag = 2;
  auto c = Convert(Op("aten::add", "Scalar"), {AtenArg::Tensor(x_), complex});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(c.status().message(), "argument 'other': the complex scalar (1, 2) cannot be an IR constant (the IR has none)");
}

TEST_F(ConvertTest, IValuesOfALiveCall) {
  at::Tensor t = at::ones({2, 3});
  TensorResolver resolve = [&](const at::Tensor& tensor) -> absl::StatusOr<Value*> {
    if (tensor.is_same(t)) return x_;
    return absl::NotFoundError("unknown tensor");
  };
  c10::OperatorHandle sum = Op("aten::sum", "dim_IntList");
  std::vector<c10::IValue> ivalues = {t, c10::IValue(std::vector<int64_t>{0}), true,
                                      c10::IValue(static_cast<int64_t>(c10::ScalarType::Double))};
  auto args = ConvertCallArguments(sum.schema(), nullptr, [&](size_t i) -> absl::StatusOr<std::optional<AtenArg>> {
    MAGI_ASSIGN_OR_RETURN(AtenArg value, AtenArgFromIValue(ivalues[i], resolve));
    return std::optional<AtenArg>(std::move(value));
  });
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(Print("aten::sum.dim_IntList", *args, {3}),
            "%out = aten::sum.dim_IntList(%x, [0], true, dtype = dtype(f64)) : f32[3]");
  // An undefined tensor is none without asking the resolver; an unknown one fails through it.
  auto undefined = AtenArgFromIValue(c10::IValue(at::Tensor()), resolve);
  ASSERT_TRUE(undefined.ok());
  EXPECT_EQ(undefined->kind, AtenArg::Kind::kTensor);
  EXPECT_EQ(undefined->tensor, nullptr);
  EXPECT_EQ(AtenArgFromIValue(c10::IValue(at::zeros({1})), resolve).status().message(), "unknown tensor");
  // Capture on meta records the device the model will run on.
  Device cpu;
  auto device = AtenArgFromIValue(c10::IValue(c10::Device(c10::kMeta)), resolve, &cpu);
  ASSERT_TRUE(device.ok());
  EXPECT_EQ(device->device, cpu);
  // A generator reaches the schema check, which refuses it with the reason.
  c10::OperatorHandle bernoulli = Op("aten::bernoulli", "p");
  std::vector<c10::IValue> random = {t, 0.5, c10::IValue(at::detail::getDefaultCPUGenerator())};
  auto refused = ConvertCallArguments(bernoulli.schema(), nullptr,
                                      [&](size_t i) -> absl::StatusOr<std::optional<AtenArg>> {
                                        MAGI_ASSIGN_OR_RETURN(AtenArg value, AtenArgFromIValue(random[i], resolve));
                                        return std::optional<AtenArg>(std::move(value));
                                      });
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(refused.status().message().find("argument 'generator': an explicit generator"), std::string::npos)
      << refused.status();
}

}  // namespace
}  // namespace magi
