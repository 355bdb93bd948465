// Donation at run time: RunDonating writes magi::adamw's results over the donated
// state (where magi/analysis/liveness.h plans it), bitwise what the functional Run
// computes, and the measured peak no longer counts a second copy of the state; the same
// for a KV cache updated by aten::scatter.src. Run leaves the caller's tensors untouched.
// A mixed-precision step after split-master-weights runs magi::adamw_split: the same
// training as the step it came from, its halves updated in place.
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "gtest/gtest.h"
#include "magi/backend/common/split_tensor.h"
#include "magi/backend/common/step_plan.h"
#include "magi/backend/torch_executable.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/parser.h"
#include "magi/passes/split_master_weights.h"

namespace magi {
namespace {

constexpr int64_t kRows = 100;

std::string AdamWStep(bool donate) {
  std::string text = R"(module @m {
  graph @g {
    input %p: f32[100] {role = param}
    input %g: f32[100]
    input %m: f32[100] {role = opt_state}
    input %v: f32[100] {role = opt_state}
    input %decay: f32[] {role = opt_state}
    input %step_size: f32[] {role = opt_state}
    input %bc2_sqrt: f32[] {role = opt_state}
    %p2, %m2, %v2 = magi::adamw(%p, %g, %m, %v, %decay, %step_size, %bc2_sqrt, beta1 = 0.9, beta2 = 0.999, eps = 1e-08) : f32[100], f32[100], f32[100]
)";
  for (const char* name : {"p", "m", "v"}) {
    text += std::string("    output ") + name + " = %" + name + "2" +
            (donate ? std::string(" {aliases = %") + name + "}" : "") + "\n";
  }
  return text + "  }\n}\n";
}

std::vector<at::Tensor> Inputs() {
  at::manual_seed(3);
  return {at::randn({kRows}), at::randn({kRows}), at::randn({kRows}), at::rand({kRows}),
          at::scalar_tensor(0.999f), at::scalar_tensor(0.01f), at::scalar_tensor(0.3f)};
}

std::vector<at::Tensor> Clones(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : tensors) out.push_back(t.clone());
  return out;
}

std::unique_ptr<TorchExecutable> Compile(const Module& module) {
  absl::StatusOr<std::unique_ptr<TorchExecutable>> executable = CompileForTorch("interpreter", module, "g");
  EXPECT_TRUE(executable.ok()) << executable.status();
  return executable.ok() ? *std::move(executable) : nullptr;
}

TEST(InterpreterDonationTest, RunDonatingUpdatesTheStateInPlaceBitwiseAsRun) {
  auto module = ParseModule(AdamWStep(/*donate=*/true));
  ASSERT_TRUE(module.ok()) << module.status();
  std::unique_ptr<TorchExecutable> executable = Compile(**module);
  ASSERT_NE(executable, nullptr);

  // Run: the caller's tensors are unchanged; the results are AdamW's.
  const std::vector<at::Tensor> original = Inputs();
  std::vector<at::Tensor> kept = Clones(original);
  absl::StatusOr<std::vector<at::Tensor>> functional = executable->Run(kept);
  ASSERT_TRUE(functional.ok()) << functional.status();
  const int64_t functional_peak = executable->last_run_stats().peak_live_bytes;
  for (size_t i = 0; i < kept.size(); ++i) EXPECT_TRUE(kept[i].equal(original[i])) << "input " << i;
  std::vector<at::Tensor> expected =
      AdamWReference(original[0], original[1], original[2], original[3], original[4], original[5], original[6],
                     AdamWConstants{0.9, 0.999, 1e-8});
  ASSERT_EQ(functional->size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE((*functional)[i].equal(expected[i])) << "output " << i;

  // RunDonating: the same values, written over the donated p, m, v.
  std::vector<at::Tensor> donated = Clones(original);
  std::vector<const void*> storage;
  for (int i : {0, 2, 3}) storage.push_back(donated[i].data_ptr());
  absl::StatusOr<std::vector<at::Tensor>> in_place = executable->RunDonating(std::move(donated));
  ASSERT_TRUE(in_place.ok()) << in_place.status();
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE((*in_place)[i].equal(expected[i])) << "output " << i;
    EXPECT_EQ((*in_place)[i].data_ptr(), storage[i]) << "output " << i << " should be written over its input";
  }
  // Inputs 4 x 400 B and three 4-byte scalars; the functional run adds p', m', v'.
  EXPECT_EQ(functional_peak, 4 * 400 + 12 + 3 * 400);
  EXPECT_EQ(executable->last_run_stats().peak_live_bytes, 4 * 400 + 12);
}

TEST(InterpreterDonationTest, WithoutAliasesRunDonatingAllocatesNewState) {
  auto module = ParseModule(AdamWStep(/*donate=*/false));
  ASSERT_TRUE(module.ok()) << module.status();
  std::unique_ptr<TorchExecutable> executable = Compile(**module);
  ASSERT_NE(executable, nullptr);
  std::vector<at::Tensor> donated = Inputs();
  const void* p = donated[0].data_ptr();
  absl::StatusOr<std::vector<at::Tensor>> outputs = executable->RunDonating(std::move(donated));
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_NE((*outputs)[0].data_ptr(), p);
}

// A KV cache's decode step: the new cache is a scatter of the old one at a position
// (the index, an input here); donated, it is written over the old cache.
constexpr char kCacheUpdate[] = R"(module @m {
  graph @g {
    input %cache: f32[2,3,8,4]
    input %index: i64[2,3,1,4]
    input %kv: f32[2,3,1,4]
    %cache2 = aten::scatter.src(%cache, 2, %index, %kv) : f32[2,3,8,4]
    %s = aten::sum(%cache2, none) : f32[]
    output s = %s
    output cache = %cache2 {aliases = %cache}
  }
}
)";

TEST(InterpreterDonationTest, RunDonatingScattersIntoTheDonatedCache) {
  auto module = ParseModule(kCacheUpdate);
  ASSERT_TRUE(module.ok()) << module.status();
  std::unique_ptr<TorchExecutable> executable = Compile(**module);
  ASSERT_NE(executable, nullptr);
  at::manual_seed(5);
  const at::Tensor cache = at::randn({2, 3, 8, 4});
  const at::Tensor index = at::tensor({5, 2}, at::kLong).view({2, 1, 1, 1}).expand({2, 3, 1, 4}).contiguous();
  const at::Tensor kv = at::randn({2, 3, 1, 4});
  const at::Tensor expected = cache.scatter(2, index, kv);

  at::Tensor kept = cache.clone();
  absl::StatusOr<std::vector<at::Tensor>> functional = executable->Run({kept, index, kv});
  ASSERT_TRUE(functional.ok()) << functional.status();
  const int64_t functional_peak = executable->last_run_stats().peak_live_bytes;
  EXPECT_TRUE(kept.equal(cache));  // Run writes no input
  EXPECT_TRUE((*functional)[1].equal(expected));

  at::Tensor donated = cache.clone();
  const void* storage = donated.data_ptr();
  std::vector<at::Tensor> inputs = {std::move(donated), index, kv};
  absl::StatusOr<std::vector<at::Tensor>> in_place = executable->RunDonating(std::move(inputs));
  ASSERT_TRUE(in_place.ok()) << in_place.status();
  EXPECT_TRUE((*in_place)[1].equal(expected));
  EXPECT_EQ((*in_place)[1].data_ptr(), storage) << "the new cache should be written over the donated one";
  EXPECT_TRUE((*in_place)[0].equal((*functional)[0]));
  // The cache is 768 B, the index 192 B, the new keys 96 B; a second cache only without donation.
  EXPECT_EQ(functional_peak, 2 * 768 + 192 + 96);
  EXPECT_EQ(executable->last_run_stats().peak_live_bytes, 768 + 192 + 96);
}

// A parameter cast to bf16 for the forward and updated by AdamW from the fp32 gradient
// of a bf16 product: what split-master-weights takes.
constexpr char kMixedPrecisionStep[] = R"(module @m {
  graph @g {
    input %x: bf16[100]
    input %p: f32[100] {role = param}
    input %m: f32[100] {role = opt_state}
    input %v: f32[100] {role = opt_state}
    input %decay: f32[] {role = opt_state}
    input %step_size: f32[] {role = opt_state}
    input %bc2_sqrt: f32[] {role = opt_state}
    %pb = aten::_to_copy(%p, dtype = dtype(bf16), layout = none, device = none, pin_memory = none, non_blocking = false, memory_format = none) : bf16[100]
    %y = aten::mul.Tensor(%pb, %x) : bf16[100]
    %g = aten::_to_copy(%y, dtype = dtype(f32), layout = none, device = none, pin_memory = none, non_blocking = false, memory_format = none) : f32[100]
    %p2, %m2, %v2 = magi::adamw(%p, %g, %m, %v, %decay, %step_size, %bc2_sqrt, beta1 = 0.9, beta2 = 0.999, eps = 1e-08) : f32[100], f32[100], f32[100]
    output y = %y
    output p = %p2 {aliases = %p}
    output m = %m2 {aliases = %m}
    output v = %v2 {aliases = %v}
  }
}
)";

TEST(InterpreterDonationTest, SplitMasterWeightsTrainsAsTheStepItCameFrom) {
  auto plain = ParseModule(kMixedPrecisionStep);
  auto split = ParseModule(kMixedPrecisionStep);
  ASSERT_TRUE(plain.ok() && split.ok());
  SplitMasterWeights pass;
  absl::StatusOr<bool> changed = pass.Run(**split);
  ASSERT_TRUE(changed.ok() && *changed) << changed.status();
  // Inputs x, m, v, decay, step_size, bc2_sqrt, p.hi, p.lo; outputs y, p.hi, p.lo, m, v.
  const Graph& graph = *(*split)->FindGraph("g");
  ASSERT_EQ(graph.inputs().size(), 8u);
  ASSERT_EQ(graph.outputs().size(), 5u);
  ASSERT_EQ(graph.outputs()[1].name, "p.hi");
  std::unique_ptr<TorchExecutable> plain_step = Compile(**plain);
  std::unique_ptr<TorchExecutable> split_step = Compile(**split);
  ASSERT_NE(plain_step, nullptr);
  ASSERT_NE(split_step, nullptr);

  at::manual_seed(7);
  auto [hi, lo] = SplitTensorToBf16(at::randn({kRows}));
  const at::Tensor x = at::randn({kRows}).to(at::kBFloat16);
  const at::Tensor m = at::randn({kRows}) * 0.1, v = at::rand({kRows}) * 0.01;
  const at::Tensor decay = at::scalar_tensor(0.999f), step_size = at::scalar_tensor(0.01f);
  const at::Tensor bc2_sqrt = at::scalar_tensor(0.3f);
  // Three steps, each side from its own previous state.
  at::Tensor p_plain = JoinSplitTensor(hi, lo), m_plain = m.clone(), v_plain = v.clone();
  at::Tensor hi_split = hi.clone(), lo_split = lo.clone(), m_split = m.clone(), v_split = v.clone();
  for (int step = 0; step < 3; ++step) {
    absl::StatusOr<std::vector<at::Tensor>> a =
        plain_step->RunDonating({x, p_plain, m_plain, v_plain, decay, step_size, bc2_sqrt});
    ASSERT_TRUE(a.ok()) << a.status();
    const void* hi_storage = hi_split.data_ptr();
    absl::StatusOr<std::vector<at::Tensor>> b =
        split_step->RunDonating({x, m_split, v_split, decay, step_size, bc2_sqrt, hi_split, lo_split});
    ASSERT_TRUE(b.ok()) << b.status();
    // The forward computed with the bf16 cast of the same master: the same product.
    EXPECT_TRUE((*a)[0].equal((*b)[0])) << "step " << step;
    EXPECT_TRUE((*a)[2].equal((*b)[3])) << "step " << step;
    EXPECT_TRUE((*a)[3].equal((*b)[4])) << "step " << step;
    EXPECT_EQ((*b)[1].data_ptr(), hi_storage) << "the high half should be updated in place";
    // hi' is the bf16 cast of p'; the joined master is p' except an exact tie, one ulp off.
    p_plain = (*a)[1];
    m_plain = (*a)[2];
    v_plain = (*a)[3];
    hi_split = (*b)[1];
    lo_split = (*b)[2];
    m_split = (*b)[3];
    v_split = (*b)[4];
    EXPECT_TRUE(hi_split.view(at::kShort).equal(p_plain.to(at::kBFloat16).view(at::kShort)));
    at::Tensor tie = p_plain.view(at::kInt).bitwise_and(0xffff).eq(0x8000);
    at::Tensor joined = JoinSplitTensor(hi_split, lo_split);
    EXPECT_TRUE(joined.masked_select(tie.logical_not()).equal(p_plain.masked_select(tie.logical_not())));
    p_plain = joined;  // both go on from the same master
  }
}

}  // namespace
}  // namespace magi
