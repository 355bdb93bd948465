// Split master weights on a small mixed-precision step (text IR): the casts of a parameter
// that is only cast to bf16 and updated go, its AdamW becomes magi::adamw_split on two
// halves, its outputs become two; parameters used any other way stay.
#include "magi/passes/split_master_weights.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/magi_ops.h"
#include "magi/ir/parser.h"
#include "magi/ir/printer.h"
#include "magi/ir/verifier.h"

namespace magi {
namespace {

// %w.shard: cast twice (forward and backward gathers) and updated: split.
// %b.shard: also read in fp32 by an add: stays. %u.shard: only updated, never cast: stays.
constexpr char kStep[] = R"(module @m {
  graph @step {
    input %x: bf16[2,8]
    input %w.shard: f32[8,4] {role = param}
    input %b.shard: f32[4] {role = param}
    input %u.shard: f32[4] {role = param}
    input %w.grad: f32[8,4]
    input %b.grad: f32[4]
    input %w.shard.exp_avg: f32[8,4] {role = opt_state}
    input %w.shard.exp_avg_sq: f32[8,4] {role = opt_state}
    input %b.shard.exp_avg: f32[4] {role = opt_state}
    input %b.shard.exp_avg_sq: f32[4] {role = opt_state}
    input %u.shard.exp_avg: f32[4] {role = opt_state}
    input %u.shard.exp_avg_sq: f32[4] {role = opt_state}
    input %adamw.decay: f32[]
    input %adamw.step_size: f32[]
    input %adamw.bc2_sqrt: f32[]
    %wf = aten::_to_copy(%w.shard, dtype = dtype(bf16), layout = none, device = none, pin_memory = none, non_blocking = false, memory_format = none) : bf16[8,4]
    %y = aten::mm(%x, %wf) : bf16[2,4]
    %bf = aten::_to_copy(%b.shard, dtype = dtype(bf16), layout = none, device = none, pin_memory = none, non_blocking = false, memory_format = none) : bf16[4]
    %yb = aten::add.Tensor(%y, %bf, alpha = 1) : bf16[2,4]
    %wb = aten::_to_copy(%w.shard, dtype = dtype(bf16), layout = none, device = none, pin_memory = none, non_blocking = false, memory_format = none) : bf16[8,4]
    %z = aten::mm(%x, %wb) : bf16[2,4]
    %b32 = aten::add.Tensor(%b.shard, %b.grad, alpha = 1) : f32[4]
    %w2, %wm, %wv = magi::adamw(%w.shard, %w.grad, %w.shard.exp_avg, %w.shard.exp_avg_sq, %adamw.decay, %adamw.step_size, %adamw.bc2_sqrt, beta1 = 0.8, beta2 = 0.99, eps = 1e-06) : f32[8,4], f32[8,4], f32[8,4]
    %b2, %bm, %bv = magi::adamw(%b.shard, %b.grad, %b.shard.exp_avg, %b.shard.exp_avg_sq, %adamw.decay, %adamw.step_size, %adamw.bc2_sqrt, beta1 = 0.9, beta2 = 0.999, eps = 1e-08) : f32[4], f32[4], f32[4]
    %u2, %um, %uv = magi::adamw(%u.shard, %b.grad, %u.shard.exp_avg, %u.shard.exp_avg_sq, %adamw.decay, %adamw.step_size, %adamw.bc2_sqrt, beta1 = 0.9, beta2 = 0.999, eps = 1e-08) : f32[4], f32[4], f32[4]
    output loss = %yb
    output z = %z
    output b32 = %b32
    output w.shard = %w2 {aliases = %w.shard}
    output w.shard.exp_avg = %wm {aliases = %w.shard.exp_avg}
    output w.shard.exp_avg_sq = %wv {aliases = %w.shard.exp_avg_sq}
    output b.shard = %b2 {aliases = %b.shard}
    output u.shard = %u2 {aliases = %u.shard}
  }
}
)";

std::unique_ptr<Module> Parse(const std::string& text) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(text);
  EXPECT_TRUE(module.ok()) << module.status();
  return module.ok() ? *std::move(module) : nullptr;
}

TEST(SplitMasterWeightsTest, ACastAndUpdatedParameterIsHeldAsTwoHalves) {
  std::unique_ptr<Module> module = Parse(kStep);
  ASSERT_NE(module, nullptr);
  SplitMasterWeights pass;
  absl::StatusOr<bool> changed = pass.Run(*module);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  ASSERT_TRUE(VerifyModule(*module).ok()) << VerifyModule(*module) << "\n" << PrintModule(*module);
  const Graph& step = *module->FindGraph("step");

  EXPECT_EQ(step.FindValue("w.shard"), nullptr);
  Value* hi = step.FindValue("w.shard.hi");
  Value* lo = step.FindValue("w.shard.lo");
  ASSERT_NE(hi, nullptr);
  ASSERT_NE(lo, nullptr);
  EXPECT_EQ(hi->type().ToString(), "bf16[8,4]");
  EXPECT_EQ(lo->type().ToString(), "i16[8,4]");
  EXPECT_EQ(hi->role(), InputRole::kParam);
  EXPECT_EQ(lo->role(), InputRole::kParam);
  // Both matmuls read the high half; only %b.shard's cast is left.
  int casts = 0, splits = 0, adamws = 0;
  for (const Node* node : step.nodes()) {
    if (node->op() == "aten::mm") {
      EXPECT_EQ(node->operand(1), hi) << PrintNode(*node);
    }
    if (node->op() == "aten::_to_copy") {
      ++casts;
      EXPECT_EQ(node->operand(0)->name(), "b.shard");
    }
    if (node->op() == kAdamWOp) ++adamws;
    if (node->op() != kAdamWSplitOp) continue;
    ++splits;
    EXPECT_EQ(node->operand(kAdamWSplitHi), hi);
    EXPECT_EQ(node->operand(kAdamWSplitLo), lo);
    EXPECT_EQ(node->operand(kAdamWSplitGrad)->name(), "w.grad");
    EXPECT_EQ(node->operand(kAdamWSplitExpAvg)->name(), "w.shard.exp_avg");
    EXPECT_EQ(node->operand(kAdamWSplitBc2Sqrt)->name(), "adamw.bc2_sqrt");
    AdamWConstants constants = AdamWConstantsOf(*node);
    EXPECT_EQ(constants.beta1, 0.8);
    EXPECT_EQ(constants.beta2, 0.99);
    EXPECT_EQ(constants.eps, 1e-6);
  }
  EXPECT_EQ(casts, 1);
  EXPECT_EQ(splits, 1);
  EXPECT_EQ(adamws, 2);  // %b.shard's and %u.shard's
  // The outputs, in order: the parameter's became its two halves where it was, donated.
  std::string outputs;
  for (const GraphOutput& output : step.outputs()) {
    absl::StrAppend(&outputs, output.name, "=", output.value->producer() ? output.value->producer()->op() : "input",
                    output.aliases ? absl::StrCat("@", output.aliases->name()) : "", " ");
  }
  EXPECT_EQ(outputs,
            "loss=aten::add.Tensor z=aten::mm b32=aten::add.Tensor w.shard.hi=magi::adamw_split@w.shard.hi "
            "w.shard.lo=magi::adamw_split@w.shard.lo w.shard.exp_avg=magi::adamw_split@w.shard.exp_avg "
            "w.shard.exp_avg_sq=magi::adamw_split@w.shard.exp_avg_sq b.shard=magi::adamw@b.shard "
            "u.shard=magi::adamw@u.shard ");
  // Nothing left to split.
  absl::StatusOr<bool> again = pass.Run(*module);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(*again);
}

TEST(SplitMasterWeightsTest, ParametersReadOtherwiseStay) {
  for (const char* extra : {
           // the new parameter read in the step
           "    %again = aten::neg(%w2) : f32[8,4]\n    output again = %again\n",
           // the parameter returned as it is
           "    output raw = %w.shard\n",
           // a cast that changes the memory format too
           "    %wc = aten::_to_copy(%w.shard, dtype = dtype(bf16), layout = none, device = none, pin_memory = none, "
           "non_blocking = false, memory_format = 1) : bf16[8,4]\n    output wc = %wc\n",
       }) {
    std::string text = kStep;
    text.insert(text.find("    output loss"), extra);
    std::unique_ptr<Module> module = Parse(text);
    ASSERT_NE(module, nullptr) << extra;
    SplitMasterWeights pass;
    ASSERT_TRUE(pass.Run(*module).ok());
    EXPECT_NE(module->FindGraph("step")->FindValue("w.shard"), nullptr) << extra;
    EXPECT_EQ(module->FindGraph("step")->FindValue("w.shard.hi"), nullptr) << extra;
  }
}

TEST(SplitMasterWeightsTest, TheVerifierChecksAdamWSplit) {
  std::unique_ptr<Module> module = Parse(R"(module @m {
  graph @g {
    input %hi: bf16[4]
    input %lo: f32[4]
    input %g: f32[4]
    input %m: f32[4]
    input %v: f32[4]
    input %s: f32[]
    %a, %b, %c, %d = magi::adamw_split(%hi, %lo, %g, %m, %v, %s, %s, %s, beta1 = 0.9, beta2 = 0.999, eps = 1e-08) : bf16[4], i16[4], f32[4], f32[4]
    output a = %a
  }
}
)");
  ASSERT_NE(module, nullptr);
  absl::Status verified = VerifyModule(*module);
  EXPECT_FALSE(verified.ok());
  EXPECT_NE(verified.message().find("operand 1 (lo) is f32[4]; expected i16 of the sizes of hi"), std::string::npos)
      << verified;
}

}  // namespace
}  // namespace magi
