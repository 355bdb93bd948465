// CallOperator's fill of uninitialized results in deterministic mode: LibTorch's own fill
// of every allocation is off there (magi/compat/deterministic.h), so the one kind of op
// whose results nobody wrote (OpTraits::uninitialized) is filled by the executor.
#include "magi/backend/common/step_plan.h"

#include <ATen/ATen.h>

#include <limits>
#include <memory>

#include "gtest/gtest.h"
#include "magi/compat/deterministic.h"
#include "magi/ir/parser.h"

namespace magi {
namespace {

constexpr char kGraph[] = R"(module @m {
  graph @g {
    input %x: f32[4]
    %e = aten::new_empty_strided(%x, [4], [1], dtype = dtype(f32), layout = 0, device = device(cpu), pin_memory = none) : f32[4]
    %i = aten::new_empty_strided(%x, [2], [1], dtype = dtype(i64), layout = 0, device = device(cpu), pin_memory = none) : i64[2]
    %y = aten::relu(%x) : f32[4]
    output e = %e
    output i = %i
    output y = %y
  }
}
)";

struct Ran {
  at::Tensor e, i, y;
};

Ran RunAll(const StepPlan& step, const at::Tensor& x) {
  std::vector<at::Tensor> slots(step.num_slots);
  slots[step.input_slots[0]] = x;
  torch::jit::Stack stack;
  for (const NodePlan& node : step.nodes) {
    absl::StatusOr<std::vector<at::Tensor>> results = CallOperator(node, slots, stack);
    EXPECT_TRUE(results.ok()) << results.status();
    if (!results.ok()) return {};
    for (size_t k = 0; k < results->size(); ++k) slots[node.result_slots[k]] = (*results)[k];
  }
  return {slots[step.output_slots[0]], slots[step.output_slots[1]], slots[step.output_slots[2]]};
}

TEST(StepPlanTest, UninitializedResultsAreFilledInDeterministicModeOnly) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kGraph);
  ASSERT_TRUE(module.ok()) << module.status();
  absl::StatusOr<StepPlan> step = BuildStepPlan(*(*module)->FindGraph("g"));
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_TRUE(step->nodes[0].uninitialized);
  EXPECT_TRUE(step->nodes[1].uninitialized);
  EXPECT_FALSE(step->nodes[2].uninitialized);
  at::Tensor x = at::tensor({-1.0f, 2.0f, -3.0f, 4.0f});

  compat::SetDeterministicAlgorithms(true);
  Ran deterministic = RunAll(*step, x);
  compat::SetDeterministicAlgorithms(false);
  ASSERT_TRUE(deterministic.e.defined());
  EXPECT_TRUE(at::isnan(deterministic.e).all().item<bool>()) << deterministic.e;
  EXPECT_TRUE((deterministic.i == std::numeric_limits<int64_t>::max()).all().item<bool>()) << deterministic.i;
  EXPECT_TRUE(at::equal(deterministic.y, at::relu(x)));  // ops that write their results: untouched

  // Outside deterministic mode the executor leaves empty tensors as LibTorch makes them.
  Ran plain = RunAll(*step, x);
  ASSERT_TRUE(plain.y.defined());
  EXPECT_TRUE(at::equal(plain.y, at::relu(x)));
}

}  // namespace
}  // namespace magi
