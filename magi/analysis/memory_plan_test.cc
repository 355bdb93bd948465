#include "magi/analysis/memory_plan.h"

#include <limits>

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/analysis/liveness.h"
#include "magi/ir/parser.h"

namespace magi {
namespace {

TEST(MemoryPlanTest, PeakFollowsLifetimesAndViewsShareStorage) {
  // x: 400 B. a (400 B) is used by b and by its view v; c uses v last.
  auto module = ParseModule(R"(module @m {
  graph @g {
    input %x: f32[100]
    %a = aten::neg(%x) : f32[100]
    %v = aten::view(%a, [10, 10]) : f32[10,10]
    %b = aten::exp(%x) : f32[100]
    %c = aten::sum(%v, none) : f32[]
    %d = aten::mul.Tensor(%b, %c) : f32[100]
    output d = %d
  }
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  absl::StatusOr<MemoryPlan> plan = PlanMemory(*(*module)->FindGraph("g"));
  ASSERT_TRUE(plan.ok()) << plan.status();
  // After each node: a (x+a), v (no new bytes), b (x dies: a+b), c (a dies: b+c), d (b,c die: d).
  EXPECT_EQ(plan->live_after, (std::vector<int64_t>{800, 800, 800, 404, 400}));
  EXPECT_EQ(plan->peak_bytes, 1200);  // x, a and b while exp runs
  EXPECT_EQ(plan->peak_node, 2);
  absl::StatusOr<Liveness> liveness = ComputeLiveness(*(*module)->FindGraph("g"));
  ASSERT_TRUE(liveness.ok()) << liveness.status();
  std::vector<std::string> at_peak;
  for (const StorageLifetime& storage : StoragesLiveAt(*liveness, plan->peak_node)) {
    at_peak.push_back(storage.value->name());
  }
  EXPECT_EQ(at_peak, (std::vector<std::string>{"x", "a", "b"}));  // largest first, ties in order
  EXPECT_EQ(StoragesLiveAt(*liveness, -1).size(), 1u);            // before the first node: x
  // x's buffer is free after exp; a's after sum: d reuses one of them.
  const Graph& g = *(*module)->FindGraph("g");
  EXPECT_FALSE(plan->buffer_of.contains(g.FindValue("v")));  // a view has no storage of its own
  // x, a, b need three 400-byte buffers at the peak; c (4 B) and d reuse freed ones.
  EXPECT_EQ(plan->buffer_sizes, (std::vector<int64_t>{400, 400, 400}));
  EXPECT_EQ(plan->total_buffer_bytes(), 1200);
  // A caller that keeps x (not donated) keeps its 400 bytes to the end.
  absl::StatusOr<MemoryPlan> held = PlanMemory(g, /*assign_buffers=*/false, {/*inputs_held_by_caller=*/true});
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->live_after, (std::vector<int64_t>{800, 800, 1200, 804, 800}));
}

// A node's working bytes (a partition's inner buffers) count at that node only: the peak
// there is what is live plus the larger of its results and its working bytes.
TEST(MemoryPlanTest, WorkingBytesCountWhileTheNodeRuns) {
  auto module = ParseModule(R"(module @m {
  graph @g {
    input %x: f32[100]
    %a = aten::neg(%x) : f32[100]
    %b = aten::exp(%a) : f32[100]
    output b = %b
  }
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  const Graph& g = *(*module)->FindGraph("g");
  absl::StatusOr<MemoryPlan> plain = PlanMemory(g, /*assign_buffers=*/false);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->start_bytes, 400);
  EXPECT_EQ(plain->peak_bytes, 800);
  WorkingBytesFn working = [](const Node& node) -> int64_t { return node.op() == "aten::exp" ? 1000 : 100; };
  absl::StatusOr<MemoryPlan> with = PlanMemory(g, /*assign_buffers=*/false, {}, working);
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_EQ(with->peak_bytes, 400 + 1000);  // a, and exp's 1000 bytes while it runs
  EXPECT_EQ(with->peak_node, 1);
  EXPECT_EQ(with->live_after, plain->live_after);  // afterwards only the results stay
  // Fewer working bytes than results: the results count (neg's 100 < its 400).
  WorkingBytesFn small = [](const Node&) -> int64_t { return 100; };
  EXPECT_EQ(PlanMemory(g, false, {}, small)->peak_bytes, 800);
  // Past int64: an error, not a wrapped peak.
  WorkingBytesFn huge = [](const Node&) { return std::numeric_limits<int64_t>::max(); };
  EXPECT_EQ(PlanMemory(g, false, {}, huge).status().code(), absl::StatusCode::kOutOfRange);
}

// A partition call's results share storage where its callee returns views: of one of its
// inputs (the operand's storage, kept alive as long as the result) or of another result.
TEST(MemoryPlanTest, CallResultsThatTheCalleeReturnsAsViewsShareStorage) {
  auto module = ParseModule(R"(module @m {
  graph @g.p.0 {
    input %x: f32[100]
    input %w: f32[100]
    %t = aten::view(%w, [10, 10]) : f32[10,10]
    %e = aten::exp(%x) : f32[100]
    %v = aten::view(%e, [10, 10]) : f32[10,10]
    output t = %t
    output e = %e
    output v = %v
  }
  graph @g {
    input %a: f32[100]
    input %b: f32[100]
    %t, %e, %v = magi::call([%a, %b], callee = "g.p.0") : f32[10,10], f32[100], f32[10,10]
    %s = aten::sum(%t, none) : f32[]
    %n = aten::neg(%v) : f32[10,10]
    output s = %s
    output n = %n
  }
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  const Graph& g = *(*module)->FindGraph("g");
  absl::StatusOr<Liveness> liveness = ComputeLiveness(g);
  ASSERT_TRUE(liveness.ok()) << liveness.status();
  auto owner = [&](const char* name) { return liveness->storages[liveness->storage_of.at(g.FindValue(name))].value; };
  EXPECT_EQ(owner("t"), g.FindValue("b"));  // a view of the call's second operand
  EXPECT_EQ(owner("e"), g.FindValue("e"));  // new
  EXPECT_EQ(owner("v"), g.FindValue("e"));  // a view of another result
  // %b lives as long as %t is read (the sum, node 1), not only through the call.
  EXPECT_EQ(liveness->storages[liveness->storage_of.at(g.FindValue("b"))].dies, 1);
  absl::StatusOr<MemoryPlan> plan = PlanMemory(g, /*assign_buffers=*/false);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->peak_bytes, 3 * 400);  // a, b and the one new storage (e, v) at the call
}

// A callee that splits one buffer into pieces returns views of it: the first piece's
// storage holds the whole buffer (here the third piece is not returned at all), and an
// input returned as it is shares the operand's storage.
TEST(MemoryPlanTest, CallResultsThatArePiecesOfOneBufferHoldAllOfIt) {
  auto module = ParseModule(R"(module @m {
  graph @g.p.0 {
    input %x: f32[300]
    %e = aten::exp(%x) : f32[300]
    %q = aten::slice.Tensor(%e, 0, 0, 100, 1) : f32[100]
    %k = aten::slice.Tensor(%e, 0, 100, 200, 1) : f32[100]
    output q = %q
    output k = %k
    output x = %x
  }
  graph @g {
    input %a: f32[300]
    %q, %k, %x = magi::call([%a], callee = "g.p.0") : f32[100], f32[100], f32[300]
    %s = aten::add.Tensor(%q, %k, 1) : f32[100]
    %t = aten::sum(%x, none) : f32[]
    output s = %s
    output t = %t
  }
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  const Graph& g = *(*module)->FindGraph("g");
  absl::StatusOr<Liveness> liveness = ComputeLiveness(g);
  ASSERT_TRUE(liveness.ok()) << liveness.status();
  const StorageLifetime& q = liveness->storages[liveness->storage_of.at(g.FindValue("q"))];
  EXPECT_EQ(q.value, g.FindValue("q"));
  EXPECT_EQ(q.bytes, 1200);  // all of exp's buffer
  EXPECT_EQ(liveness->storage_of.at(g.FindValue("k")), liveness->storage_of.at(g.FindValue("q")));
  EXPECT_EQ(liveness->storage_of.at(g.FindValue("x")), liveness->storage_of.at(g.FindValue("a")));
  absl::StatusOr<MemoryPlan> plan = PlanMemory(g, /*assign_buffers=*/false);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->peak_bytes, 1200 + 1200 + 400);  // at the add: %a (read again as %x), the call's buffer, %s
}

// Calls that call each other (the verifier does not forbid it) are analyzed to a bounded
// depth, not forever.
TEST(MemoryPlanTest, CallsInACycleAreAnalyzedToABoundedDepth) {
  auto module = ParseModule(R"(module @m {
  graph @a {
    input %x: f32[10]
    %y = magi::call([%x], callee = "b") : f32[10]
    output y = %y
  }
  graph @b {
    input %x: f32[10]
    %y = magi::call([%x], callee = "a") : f32[10]
    output y = %y
  }
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  absl::StatusOr<MemoryPlan> plan = PlanMemory(*(*module)->FindGraph("a"), /*assign_buffers=*/false);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // %x and %y: past the depth bound the innermost call is opaque, its result a storage of
  // its own, and so is every result up the chain.
  EXPECT_EQ(plan->peak_bytes, 80);
}

// Each tensor fits in int64 bytes, their sum does not: an error naming where, never a
// wrapped peak.
TEST(MemoryPlanTest, LiveBytesPastInt64AreAnError) {
  auto inputs = ParseModule(R"(module @m {
  graph @g {
    input %x: f32[1152921504606846976]
    input %y: f32[1152921504606846976]
    output y = %y
  }
}
)");
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  absl::StatusOr<MemoryPlan> plan = PlanMemory(*(*inputs)->FindGraph("g"));
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(plan.status().message(),
            "graph @g: the bytes live at the start (graph inputs) add up to more than int64 can hold "
            "(9223372036854775807)");
  auto node = ParseModule(R"(module @m {
  graph @g {
    input %x: f32[1152921504606846976]
    %y = aten::neg(%x) : f32[1152921504606846976]
    %z = aten::neg(%y) : f32[1152921504606846976]
    output z = %z
  }
}
)");
  ASSERT_TRUE(node.ok()) << node.status();
  plan = PlanMemory(*(*node)->FindGraph("g"));
  EXPECT_EQ(plan.status().message(),
            "graph @g: the bytes live at aten::neg defining %y at line 4:10 add up to more than int64 can hold "
            "(9223372036854775807)");
}

TEST(MemoryPlanTest, DynamicSizesAreAnError) {
  auto module = ParseModule("module @m { graph @g { input %x: f32[?] } }");
  ASSERT_TRUE(module.ok());
  EXPECT_EQ(PlanMemory(*(*module)->FindGraph("g")).status().message(), "%x has a dynamic size");
}

// Donation: an optimizer step whose new state aliases the old (GraphOutput::aliases) is
// planned in place: magi::adamw writes p', m', v' over p, m, v, so the state is counted
// once. Without the aliases, or when the donated input is read after the update, the
// new state takes storage of its own.
std::string AdamWStep(bool donate, bool read_after) {
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
  if (read_after) text += "    %n = aten::sum(%p, none) : f32[]\n    output n = %n\n";
  const std::string alias = donate ? " {aliases = %" : "";
  for (const char* name : {"p", "m", "v"}) {
    text += std::string("    output ") + name + " = %" + name + "2" + (donate ? alias + name + "}" : "") + "\n";
  }
  return text + "  }\n}\n";
}

TEST(MemoryPlanTest, DonatedOptimizerStateIsUpdatedInPlace) {
  auto plan_of = [](bool donate, bool read_after) -> int64_t {
    auto module = ParseModule(AdamWStep(donate, read_after));
    EXPECT_TRUE(module.ok()) << module.status();
    if (!module.ok()) return -1;
    absl::StatusOr<MemoryPlan> plan = PlanMemory(*(*module)->FindGraph("g"));
    EXPECT_TRUE(plan.ok()) << plan.status();
    return plan.ok() ? plan->peak_bytes : -1;
  };
  // p, g, m, v (4 x 400 B) and three 4-byte scalars, plus p', m', v' without donation.
  EXPECT_EQ(plan_of(/*donate=*/false, false), 4 * 400 + 12 + 3 * 400);
  EXPECT_EQ(plan_of(/*donate=*/true, false), 4 * 400 + 12);
  // %p is read after the update: p' cannot overwrite it (m' and v' still can).
  EXPECT_EQ(plan_of(/*donate=*/true, /*read_after=*/true), 4 * 400 + 12 + 400);

  auto module = ParseModule(AdamWStep(true, false));
  ASSERT_TRUE(module.ok());
  const Graph& g = *(*module)->FindGraph("g");
  absl::StatusOr<Liveness> liveness = ComputeLiveness(g);
  ASSERT_TRUE(liveness.ok());
  EXPECT_EQ(liveness->in_place.at(g.FindValue("p2")), g.FindValue("p"));
  EXPECT_EQ(liveness->storage_of.at(g.FindValue("m2")), liveness->storage_of.at(g.FindValue("m")));
  // p's storage now lives to the end, as the output p.
  EXPECT_EQ(liveness->storages[liveness->storage_of.at(g.FindValue("p"))].dies, liveness->num_nodes);
}

// A KV cache's decode step: the new cache is aten::scatter.src of the old one; donated,
// it is planned over the old cache (counted once), as aten::scatter_.src runs it.
std::string CacheUpdate(bool donate) {
  return std::string(R"(module @m {
  graph @g {
    input %cache: f32[2,4,64,16]
    input %index: i64[2,4,1,16]
    input %kv: f32[2,4,1,16]
    %cache2 = aten::scatter.src(%cache, 2, %index, %kv) : f32[2,4,64,16]
    %s = aten::sum(%cache2, none) : f32[]
    output s = %s
    output cache = %cache2)") +
         (donate ? " {aliases = %cache}" : "") + "\n  }\n}\n";
}

TEST(MemoryPlanTest, DonatedCacheIsScatteredInPlace) {
  auto plan_of = [](bool donate) -> int64_t {
    auto module = ParseModule(CacheUpdate(donate));
    EXPECT_TRUE(module.ok()) << module.status();
    if (!module.ok()) return -1;
    absl::StatusOr<MemoryPlan> plan = PlanMemory(*(*module)->FindGraph("g"));
    EXPECT_TRUE(plan.ok()) << plan.status();
    return plan.ok() ? plan->peak_bytes : -1;
  };
  const int64_t cache = 2 * 4 * 64 * 16 * 4, index = 2 * 4 * 16 * 8, kv = 2 * 4 * 16 * 4;
  EXPECT_EQ(plan_of(/*donate=*/false), 2 * cache + index + kv);  // old and new cache at the scatter
  EXPECT_EQ(plan_of(/*donate=*/true), cache + index + kv);
}

// The same update as aten::index_put at (row, head, position), the default cache write: its
// result is planned over the donated cache too (aten::index_put_ runs it).
TEST(MemoryPlanTest, DonatedCacheIsIndexPutInPlace) {
  auto plan_of = [](bool donate) -> int64_t {
    auto module = ParseModule(std::string(R"(module @m {
  graph @g {
    input %cache: f32[2,4,64,16]
    input %rows: i64[2,1,1]
    input %heads: i64[1,4,1]
    input %positions: i64[2,1,1]
    input %kv: f32[2,4,1,16]
    %cache2 = aten::index_put(%cache, [%rows, %heads, %positions], %kv, false) : f32[2,4,64,16]
    %s = aten::sum(%cache2, none) : f32[]
    output s = %s
    output cache = %cache2)") + (donate ? " {aliases = %cache}" : "") + "\n  }\n}\n");
    EXPECT_TRUE(module.ok()) << module.status();
    if (!module.ok()) return -1;
    absl::StatusOr<Liveness> liveness = ComputeLiveness(*(*module)->FindGraph("g"));
    EXPECT_TRUE(liveness.ok()) << liveness.status();
    if (liveness.ok()) EXPECT_EQ(liveness->in_place.size(), donate ? 1u : 0u);
    absl::StatusOr<MemoryPlan> plan = PlanMemory(*(*module)->FindGraph("g"));
    EXPECT_TRUE(plan.ok()) << plan.status();
    return plan.ok() ? plan->peak_bytes : -1;
  };
  const int64_t cache = 2 * 4 * 64 * 16 * 4, indices = (2 + 4 + 2) * 8, kv = 2 * 4 * 16 * 4;
  EXPECT_EQ(plan_of(/*donate=*/false), 2 * cache + indices + kv);
  EXPECT_EQ(plan_of(/*donate=*/true), cache + indices + kv);
}

// A step on CUDA whose optimizer state lives on the host (CPU offload): the device's peak
// and the host's are counted apart, and buffers never mix them.
TEST(MemoryPlanTest, HostMemoryIsCountedApartFromTheDevice) {
  auto module = ParseModule(R"(module @m {
  graph @g {
    input %x: f32[100]@cuda
    input %state: f32[50] {role = opt_state}
    %a = aten::neg(%x) : f32[100]@cuda
    %g = aten::_to_copy(%a, dtype = none, layout = none, device = device(cpu), pin_memory = none, non_blocking = false, memory_format = none) : f32[100]
    %s = aten::add.Tensor(%state, %state, 1) : f32[50]
    %h = aten::sum(%g, none) : f32[]
    output h = %h
    output s = %s
  }
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  const Graph& g = *(*module)->FindGraph("g");
  absl::StatusOr<MemoryPlan> plan = PlanMemory(g);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Device: x and a (800 B while neg runs; a lives until the copy).
  EXPECT_EQ(plan->peak_bytes, 800);
  EXPECT_EQ(plan->peak_node, 0);
  EXPECT_EQ(plan->live_after, (std::vector<int64_t>{400, 0, 0, 0}));
  // Host: state (200) + g (400) + s (200) while add runs.
  EXPECT_EQ(plan->host_peak_bytes, 800);
  EXPECT_EQ(plan->host_peak_node, 2);
  for (const auto& [value, buffer] : plan->buffer_of) {
    EXPECT_EQ(plan->buffer_on_host[buffer], value->type().tensor().device.type == DeviceType::kCpu) << value->name();
  }
  // On the CPU alone the CPU is the device: one account.
  auto cpu = ParseModule(R"(module @m {
  graph @g {
    input %x: f32[100]
    input %state: f32[50] {role = opt_state}
    %a = aten::neg(%x) : f32[100]
    %s = aten::add.Tensor(%state, %state, 1) : f32[50]
    output a = %a
    output s = %s
  }
}
)");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  absl::StatusOr<MemoryPlan> one = PlanMemory(*(*cpu)->FindGraph("g"));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->peak_bytes, 400 + 200 + 400);  // x, state and a while neg runs
  EXPECT_EQ(one->host_peak_bytes, 0);
  EXPECT_EQ(one->host_peak_node, -1);
}

}  // namespace
}  // namespace magi
