// StepBindings: a step graph's inputs gathered by index from the owner's maps (with the
// precedence of the name-keyed path), per-step tensors moved in, outputs handed back to
// the state and buffers, the loss and gradient norm returned.
#include "magi/training/step_inputs.h"

#include <ATen/ATen.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/parser.h"

namespace magi {
namespace {

// Inputs: a datum, a state entry, a name both a buffer and the state have (the buffer
// wins), an AdamW scalar, a per-step accumulator, a lifted constant. Outputs: the loss,
// the new state entry, a buffer's new value, something nobody keeps, the grad norm.
constexpr absl::string_view kStep = R"(module @m {
  graph @g {
    input %input.0: f32[2]
    input %w.shard: f32[2]
    input %shared: f32[2]
    input %adamw.decay: f32[]
    input %w.grad.acc: f32[2]
    input %const.0: f32[2]
    %a = aten::add(%input.0, %w.shard, 1) : f32[2]
    %b = aten::mul(%a, %shared) : f32[2]
    %c = aten::mul(%b, %adamw.decay) : f32[2]
    %d = aten::add(%c, %w.grad.acc, 1) : f32[2]
    %e = aten::add(%d, %const.0, 1) : f32[2]
    %loss = aten::sum(%e, none) : f32[]
    %n = aten::neg(%loss) : f32[]
    output loss = %loss
    output w.shard = %e
    output shared.updated = %d
    output unused = %c
    output grad_norm = %n
  }
}
)";

TEST(StepBindingsTest, GathersByIndexAndHandsOutputsBack) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  ASSERT_TRUE(module.ok()) << module.status();
  const Graph& graph = *(*module)->FindGraph("g");
  std::map<std::string, at::Tensor> state = {{"w.shard", at::full({2}, 1.0)}, {"shared", at::full({2}, 9.0)}};
  std::map<std::string, at::Tensor> buffers = {{"shared", at::full({2}, 2.0)}};
  std::vector<std::pair<std::string, at::Tensor>> constants = {{"const.0", at::full({2}, 3.0)}};
  at::Tensor decay = at::scalar_tensor(0.5);
  absl::StatusOr<StepBindings> bindings =
      StepBindings::Bind(graph, state, buffers, constants, {{"adamw.decay", &decay}});
  ASSERT_TRUE(bindings.ok()) << bindings.status();

  decay.fill_(0.25);  // written in place after binding: the step reads the new value
  std::map<std::string, at::Tensor> per_step = {{"w.grad.acc", at::full({2}, 4.0)}};
  at::Tensor datum = at::full({2}, 5.0);
  absl::StatusOr<std::vector<at::Tensor>> inputs = bindings->Gather({datum}, per_step);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  ASSERT_EQ(inputs->size(), 6u);
  EXPECT_TRUE((*inputs)[0].is_same(datum));
  EXPECT_TRUE((*inputs)[1].is_same(state.at("w.shard")));   // referenced, still the trainer's
  EXPECT_TRUE((*inputs)[2].is_same(buffers.at("shared")));  // the buffer, not the state entry
  EXPECT_EQ((*inputs)[3].item<double>(), 0.25);
  EXPECT_EQ((*inputs)[4][0].item<double>(), 4.0);
  EXPECT_FALSE(per_step.at("w.grad.acc").defined());  // moved in
  EXPECT_TRUE((*inputs)[5].is_same(constants[0].second));

  at::Tensor new_shard = at::full({2}, 7.0), new_shared = at::full({2}, 8.0);
  absl::StatusOr<StepBindings::Scalars> scalars =
      bindings->Take({at::scalar_tensor(6.0), new_shard, new_shared, at::full({2}, -1.0), at::scalar_tensor(-6.0)});
  ASSERT_TRUE(scalars.ok()) << scalars.status();
  EXPECT_EQ(scalars->loss.item<double>(), 6.0);
  EXPECT_EQ(scalars->grad_norm.item<double>(), -6.0);
  EXPECT_TRUE(state.at("w.shard").is_same(new_shard));
  EXPECT_TRUE(buffers.at("shared").is_same(new_shared));
  EXPECT_EQ(state.at("shared")[0].item<double>(), 9.0);  // the state entry the buffer shadowed: untouched
  EXPECT_EQ(state.size(), 2u);
  EXPECT_EQ(buffers.size(), 1u);
}

TEST(StepInputsTest, BufferUpdatedByNamesTheBufferOfADotUpdatedOutput) {
  std::map<std::string, at::Tensor> buffers = {{"bn.running_mean", at::zeros({2})}, {"updated", at::zeros({1})}};
  EXPECT_EQ(BufferUpdatedBy("bn.running_mean.updated", buffers), &buffers["bn.running_mean"]);
  EXPECT_EQ(BufferUpdatedBy("bn.running_mean", buffers), nullptr);
  EXPECT_EQ(BufferUpdatedBy("bn.running_var.updated", buffers), nullptr);  // no such buffer
  EXPECT_EQ(BufferUpdatedBy(".updated", buffers), nullptr);
  EXPECT_EQ(BufferUpdatedBy("loss", buffers), nullptr);
}

TEST(StepBindingsTest, MissingTensorsAndWrongOutputCountsAreErrors) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  ASSERT_TRUE(module.ok()) << module.status();
  const Graph& graph = *(*module)->FindGraph("g");
  std::map<std::string, at::Tensor> state = {{"w.shard", at::ones({2})}}, buffers = {{"shared", at::ones({2})}};
  at::Tensor decay = at::scalar_tensor(1.0);
  absl::StatusOr<StepBindings> bindings =
      StepBindings::Bind(graph, state, buffers, {{"const.0", at::ones({2})}}, {{"adamw.decay", &decay}});
  ASSERT_TRUE(bindings.ok()) << bindings.status();
  std::map<std::string, at::Tensor> none;
  absl::StatusOr<std::vector<at::Tensor>> no_datum = bindings->Gather({}, none);
  EXPECT_EQ(no_datum.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(no_datum.status().message(), "the graph needs input.0; 0 given");
  absl::StatusOr<std::vector<at::Tensor>> no_accumulator = bindings->Gather({at::ones({2})}, none);
  EXPECT_EQ(no_accumulator.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(no_accumulator.status().message(), "no tensor for graph input %w.grad.acc");
  absl::StatusOr<StepBindings::Scalars> short_outputs = bindings->Take({at::ones({})});
  EXPECT_EQ(short_outputs.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(short_outputs.status().message(), "the step returned 1 outputs, its graph has 5");
}

}  // namespace
}  // namespace magi
