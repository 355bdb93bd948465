// CallOperator's fill of uninitialized results in deterministic mode: LibTorch's own fill
// of every allocation is off there (magi/compat/deterministic.h), so the one kind of op
// whose results nobody wrote (OpTraits::uninitialized) is filled by the executor.
#include "magi/backend/common/step_plan.h"

#include <ATen/ATen.h>

#include <cstdlib>
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

// A KV cache's one-position update: the plain scatter kernel runs (on CUDA ATen would take
// its sort-based deterministic path; the CPU kernel is the same either way, so here the
// test is that results are right and the mode is back on after each call).
TEST(StepPlanTest, ScattersWithOneIndexEntryAlongDimRunInDeterministicMode) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(R"(module @m {
  graph @g {
    input %cache: f32[2,5,3]
    input %one: i64[2,1,3]
    input %two: i64[2,2,3]
    input %src: f32[2,2,3]
    %a = aten::scatter.src(%cache, 1, %one, %src) : f32[2,5,3]
    %b = aten::scatter.src(%cache, 1, %two, %src) : f32[2,5,3]
    output a = %a
    output b = %b
  }
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  absl::StatusOr<StepPlan> step = BuildStepPlan(*(*module)->FindGraph("g"));
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_EQ(step->nodes.size(), 2u);
  EXPECT_TRUE(step->nodes[0].scatter_src);
  at::Tensor cache = at::zeros({2, 5, 3});
  at::Tensor one = at::tensor({4, 4, 4, 1, 1, 1}, at::kLong).view({2, 1, 3});
  at::Tensor two = at::tensor({0, 1, 2, 3, 4, 0, 2, 2, 2, 3, 3, 3}, at::kLong).view({2, 2, 3});
  at::Tensor src = at::arange(12, at::kFloat).view({2, 2, 3});
  std::vector<at::Tensor> slots(step->num_slots);
  for (int i = 0; i < 4; ++i) slots[step->input_slots[i]] = std::vector<at::Tensor>{cache, one, two, src}[i];
  compat::SetDeterministicAlgorithms(true);
  struct ModeOffAtExit {
    ~ModeOffAtExit() { compat::SetDeterministicAlgorithms(false); }  // also when an ASSERT returns early
  } mode_off_at_exit;
  torch::jit::Stack stack;
  std::vector<at::Tensor> results;
  for (const NodePlan& node : step->nodes) {
    absl::StatusOr<std::vector<at::Tensor>> out = CallOperator(node, slots, stack);
    ASSERT_TRUE(out.ok()) << out.status();
    results.push_back((*out)[0]);
    EXPECT_TRUE(compat::DeterministicAlgorithmsEnabled());  // restored after the call
  }
  EXPECT_TRUE(at::equal(results[0], cache.scatter(1, one, src.narrow(1, 0, 1))));
  EXPECT_TRUE(at::equal(results[1], cache.scatter(1, two, src)));
}

// MAGI_CHECK_STRIDES=1: a result laid out otherwise than the IR says is an error naming the
// node (strides of size-1 dims aside); the calibrator's runs can leave the check out.
TEST(StepPlanTest, CheckStridesRejectsAResultLaidOutOtherwiseThanTheIr) {
  setenv("MAGI_CHECK_STRIDES", "1", /*overwrite=*/1);  // read once, at the first check
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(R"(module @m {
  graph @g {
    input %x: f32[3,4]
    %y = aten::relu(%x) : f32[3,4]
    %z = aten::relu(%x) : f32[1,12]
    output y = %y
    output z = %z
  }
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  absl::StatusOr<StepPlan> step = BuildStepPlan(*(*module)->FindGraph("g"));
  ASSERT_TRUE(step.ok()) << step.status();
  at::Tensor contiguous = at::zeros({3, 4});
  at::Tensor transposed = at::zeros({4, 3}).t();  // [3,4] with strides [1,3]
  EXPECT_TRUE(CheckResults(step->nodes[0], {contiguous}).ok());
  absl::Status wrong = CheckResults(step->nodes[0], {transposed});
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInternal);
  EXPECT_NE(wrong.message().find("aten::relu defining %y at line 4:10: produced f32[3,4]strides[1,3], the IR says f32[3,4] "),
            std::string::npos)
      << wrong;
  EXPECT_NE(wrong.message().find("MAGI_CHECK_STRIDES"), std::string::npos) << wrong;
  EXPECT_TRUE(CheckResults(step->nodes[0], {transposed}, /*allow_stride_check=*/false).ok());
  // A size-1 dim's stride does not matter.
  EXPECT_TRUE(CheckResults(step->nodes[1], {at::zeros({12, 1}).t()}).ok());
}

}  // namespace
}  // namespace magi
