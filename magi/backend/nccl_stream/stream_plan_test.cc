#include "magi/backend/nccl_stream/stream_plan.h"

#include <algorithm>

#include "gtest/gtest.h"
#include "magi/ir/magi_ops.h"
#include "magi/ir/parser.h"

namespace magi {
namespace {

// Two groups' gathers and a reduce-scatter, an adamw per parameter, on 2 ranks.
constexpr char kStep[] = R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @train_step {
    input %x: bf16[8,16]@cuda:0
    input %w.shard: f32[8,16]@cuda:0 {role = param}
    input %w.exp_avg: f32[8,16]@cuda:0 {role = opt_state}
    input %w.exp_avg_sq: f32[8,16]@cuda:0 {role = opt_state}
    input %decay: f32[]@cuda:0 {role = opt_state}
    input %step_size: f32[]@cuda:0 {role = opt_state}
    input %bc2: f32[]@cuda:0 {role = opt_state}
    %c = aten::_to_copy(%w.shard, dtype = dtype(bf16)) : bf16[8,16]@cuda:0
    %f = magi::all_gather_start([%c], group = "dp") : future<bf16[16,16]@cuda:0>
    %w = magi::wait(%f) : bf16[16,16]@cuda:0
    %y = aten::mm(%x, %w) : bf16[8,16]@cuda:0
    %g = aten::_to_copy(%y, dtype = dtype(f32)) : f32[8,16]@cuda:0
    %p = aten::constant_pad_nd(%g, [0, 0, 0, 8]) : f32[16,16]@cuda:0
    %r = magi::reduce_scatter_start([%p], group = "dp", reduce_op = "avg") : future<f32[8,16]@cuda:0>
    %gs = magi::wait(%r) : f32[8,16]@cuda:0
    %p2, %m2, %v2 = magi::adamw(%w.shard, %gs, %w.exp_avg, %w.exp_avg_sq, %decay, %step_size, %bc2, beta1 = 0.9, beta2 = 0.999, eps = 1e-08) : f32[8,16]@cuda:0, f32[8,16]@cuda:0, f32[8,16]@cuda:0
    output loss = %y
    output w.shard = %p2
    output w.exp_avg = %m2
    output w.exp_avg_sq = %v2
  }
}
)";

std::unique_ptr<Module> Parse(const std::string& text) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(text);
  EXPECT_TRUE(module.ok()) << module.status();
  return module.ok() ? *std::move(module) : nullptr;
}

bool Released(const StreamPlan& plan, int node, const std::string& name) {
  for (const Value* value : plan.release_after[node]) {
    if (value->name() == name) return true;
  }
  return false;
}

TEST(StreamPlanTest, StreamsEventsAndCollectiveLifetimes) {
  std::unique_ptr<Module> module = Parse(kStep);
  ASSERT_NE(module, nullptr);
  absl::StatusOr<StreamPlan> plan = BuildStreamPlan(*module, *module->FindGraph("train_step"));
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Node indices: 0 cast, 1 ag start, 2 wait, 3 mm, 4 cast, 5 pad, 6 rs start, 7 wait, 8 adamw.
  ASSERT_EQ(plan->collectives.size(), 2u);
  EXPECT_EQ(plan->collectives[0].start, 1);
  EXPECT_EQ(plan->collectives[0].wait, 2);
  EXPECT_EQ(plan->collectives[0].stream, 1);  // all-gathers' default stream, first seen
  EXPECT_EQ(plan->collectives[1].stream, 2);
  ASSERT_EQ(plan->comm_streams.size(), 2u);
  EXPECT_EQ(plan->comm_streams[1].group, "dp");
  EXPECT_EQ(plan->comm_streams[1].annotated_stream, 2);
  EXPECT_EQ(plan->stream_of_node, (std::vector<int>{0, 1, 0, 0, 0, 0, 2, 0, 0}));
  // The gather's input lives until the wait, not just until the start.
  EXPECT_TRUE(Released(*plan, 2, "c"));
  EXPECT_FALSE(Released(*plan, 1, "c"));
  EXPECT_TRUE(Released(*plan, 7, "p"));
  EXPECT_TRUE(Released(*plan, 5, "g"));  // an ordinary compute value: its last use
  // Outputs are never released; the shard is released after the (in-place) update.
  for (const auto& released : plan->release_after) {
    for (const Value* value : released) EXPECT_NE(value->name(), "p2");
  }
  EXPECT_TRUE(Released(*plan, 8, "w.shard"));
  ASSERT_EQ(plan->adamw_batches.size(), 1u);
  EXPECT_TRUE(plan->adamw_batches[0].in_place);
  EXPECT_TRUE(plan->capturable()) << plan->Summary();
  EXPECT_EQ(plan->Summary(),
            "2 collectives (0 skipped: one rank) on 2 communication streams, 4 cross-stream edges; 1 magi::adamw in "
            "1 multi-tensor batches (in place); capturable as one CUDA graph");
}

TEST(StreamPlanTest, OneRankGroupsSkipCollectivesUnlessAsked) {
  std::unique_ptr<Module> module = Parse(R"(module @m {
  process_group @dp {axis = "dp", size = 1}
  graph @train_step {
    input %w.shard: f32[8,16]@cuda:0 {role = param}
    input %w.exp_avg: f32[8,16]@cuda:0 {role = opt_state}
    input %w.exp_avg_sq: f32[8,16]@cuda:0 {role = opt_state}
    input %decay: f32[]@cuda:0 {role = opt_state}
    input %step_size: f32[]@cuda:0 {role = opt_state}
    input %bc2: f32[]@cuda:0 {role = opt_state}
    %c = aten::_to_copy(%w.shard, dtype = dtype(bf16)) : bf16[8,16]@cuda:0
    %f = magi::all_gather_start([%c], group = "dp") : future<bf16[8,16]@cuda:0>
    %w = magi::wait(%f) : bf16[8,16]@cuda:0
    %g = aten::_to_copy(%w, dtype = dtype(f32)) : f32[8,16]@cuda:0
    %r = magi::reduce_scatter_start([%g], group = "dp", reduce_op = "avg") : future<f32[8,16]@cuda:0>
    %gs = magi::wait(%r) : f32[8,16]@cuda:0
    %p2, %m2, %v2 = magi::adamw(%w.shard, %gs, %w.exp_avg, %w.exp_avg_sq, %decay, %step_size, %bc2) : f32[8,16]@cuda:0, f32[8,16]@cuda:0, f32[8,16]@cuda:0
    output w.shard = %p2
    output w.exp_avg = %m2
    output w.exp_avg_sq = %v2
  }
}
)");
  absl::StatusOr<StreamPlan> skipped = BuildStreamPlan(*module, *module->FindGraph("train_step"));
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_TRUE(skipped->collectives[0].skipped);
  EXPECT_EQ(skipped->collectives[0].stream, -1);
  EXPECT_TRUE(skipped->comm_streams.empty());
  StreamPlanOptions keep;
  keep.skip_single_rank_collectives = false;
  keep.donate_optimizer_state = false;
  absl::StatusOr<StreamPlan> kept = BuildStreamPlan(*module, *module->FindGraph("train_step"), keep);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_FALSE(kept->collectives[0].skipped);
  EXPECT_EQ(kept->comm_streams.size(), 2u);
  EXPECT_FALSE(kept->adamw_batches[0].in_place);
}

// A one-rank mixed-precision step: two bf16 gradients cast to fp32 for a skipped
// reduce-scatter; the first only feeds AdamW (deferred), the second is also a step output
// (kept), and a cast before a kept (two-rank) reduce-scatter is never deferred.
constexpr char kGradCasts[] = R"(module @m {
  process_group @dp {axis = "dp", size = 1}
  process_group @tp {axis = "tp", size = 2}
  graph @train_step {
    input %a.grad: bf16[8,16]@cuda:0
    input %b.grad: bf16[8]@cuda:0
    input %c.grad: bf16[16]@cuda:0
    input %a: f32[8,16]@cuda:0 {role = param}
    input %a.m: f32[8,16]@cuda:0 {role = opt_state}
    input %a.v: f32[8,16]@cuda:0 {role = opt_state}
    input %b: f32[8]@cuda:0 {role = param}
    input %b.m: f32[8]@cuda:0 {role = opt_state}
    input %b.v: f32[8]@cuda:0 {role = opt_state}
    input %c: f32[8]@cuda:0 {role = param}
    input %c.m: f32[8]@cuda:0 {role = opt_state}
    input %c.v: f32[8]@cuda:0 {role = opt_state}
    input %decay: f32[]@cuda:0 {role = opt_state}
    input %step_size: f32[]@cuda:0 {role = opt_state}
    input %bc2: f32[]@cuda:0 {role = opt_state}
    %ga = aten::_to_copy(%a.grad, dtype = dtype(f32), layout = none, device = none, pin_memory = none, non_blocking = false, memory_format = none) : f32[8,16]@cuda:0
    %gb = aten::_to_copy(%b.grad, dtype = dtype(f32)) : f32[8]@cuda:0
    %r0, %r1 = magi::reduce_scatter_start([%ga, %gb], group = "dp", reduce_op = "avg") : future<f32[8,16]@cuda:0>, future<f32[8]@cuda:0>
    %sa, %sb = magi::wait(%r0, %r1) : f32[8,16]@cuda:0, f32[8]@cuda:0
    %gc = aten::_to_copy(%c.grad, dtype = dtype(f32)) : f32[16]@cuda:0
    %r2 = magi::reduce_scatter_start([%gc], group = "tp", reduce_op = "avg") : future<f32[8]@cuda:0>
    %sc = magi::wait(%r2) : f32[8]@cuda:0
    %a2, %am, %av = magi::adamw(%a, %sa, %a.m, %a.v, %decay, %step_size, %bc2) : f32[8,16]@cuda:0, f32[8,16]@cuda:0, f32[8,16]@cuda:0
    %b2, %bm, %bv = magi::adamw(%b, %sb, %b.m, %b.v, %decay, %step_size, %bc2) : f32[8]@cuda:0, f32[8]@cuda:0, f32[8]@cuda:0
    %c2, %cm, %cv = magi::adamw(%c, %sc, %c.m, %c.v, %decay, %step_size, %bc2) : f32[8]@cuda:0, f32[8]@cuda:0, f32[8]@cuda:0
    output a = %a2
    output a.m = %am
    output a.v = %av
    output b = %b2
    output b.m = %bm
    output b.v = %bv
    output b.grad = %sb
    output c = %c2
    output c.m = %cm
    output c.v = %cv
  }
}
)";

TEST(StreamPlanTest, GradientCastsIntoSkippedReduceScattersAreDeferredIntoAdamW) {
  std::unique_ptr<Module> module = Parse(kGradCasts);
  ASSERT_NE(module, nullptr);
  const Graph& graph = *module->FindGraph("train_step");
  absl::StatusOr<StreamPlan> plan = BuildStreamPlan(*module, graph);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Node 0 (%ga) is deferred; node 1 (%gb: %sb is an output) and node 4 (%gc: two ranks) are not.
  EXPECT_EQ(plan->deferred_casts, std::vector<int>({0}));
  std::vector<std::string> carried;
  for (const Value* value : plan->bf16_for_f32) carried.push_back(value->name());
  EXPECT_EQ(carried, std::vector<std::string>({"ga", "sa"}));
  EXPECT_NE(plan->Summary().find("1 gradient casts deferred into AdamW"), std::string::npos) << plan->Summary();

  StreamPlanOptions off;
  off.defer_grad_casts = false;
  absl::StatusOr<StreamPlan> not_deferred = BuildStreamPlan(*module, graph, off);
  ASSERT_TRUE(not_deferred.ok()) << not_deferred.status();
  EXPECT_TRUE(not_deferred->deferred_casts.empty());
  // With the collectives kept, nothing is deferred: NCCL reduces the fp32 values.
  StreamPlanOptions kept;
  kept.skip_single_rank_collectives = false;
  absl::StatusOr<StreamPlan> with_collectives = BuildStreamPlan(*module, graph, kept);
  ASSERT_TRUE(with_collectives.ok()) << with_collectives.status();
  EXPECT_TRUE(with_collectives->deferred_casts.empty());
}

TEST(StreamPlanTest, GradientCastsWithOtherReadersOrOffTheGpuStay) {
  // The cast's fp32 result is also read by an op, or a gradient reaches an unbatched
  // AdamW (its results are read again), or the tensors are on the CPU.
  for (const char* variant : {"other_reader", "unbatched", "cpu"}) {
    std::string text = R"(module @m {
  process_group @dp {axis = "dp", size = 1}
  graph @train_step {
    input %g: bf16[8]@cuda:0
    input %p: f32[8]@cuda:0 {role = param}
    input %m: f32[8]@cuda:0 {role = opt_state}
    input %v: f32[8]@cuda:0 {role = opt_state}
    input %decay: f32[]@cuda:0 {role = opt_state}
    input %step_size: f32[]@cuda:0 {role = opt_state}
    input %bc2: f32[]@cuda:0 {role = opt_state}
    %g32 = aten::_to_copy(%g, dtype = dtype(f32)) : f32[8]@cuda:0
    %r = magi::reduce_scatter_start([%g32], group = "dp", reduce_op = "avg") : future<f32[8]@cuda:0>
    %s = magi::wait(%r) : f32[8]@cuda:0
    %p2, %m2, %v2 = magi::adamw(%p, %s, %m, %v, %decay, %step_size, %bc2) : f32[8]@cuda:0, f32[8]@cuda:0, f32[8]@cuda:0
    EXTRA
    output p = %p2
    output m = %m2
    output v = OUT_V
  }
}
)";
    std::string extra, out_v = "%v2";
    if (std::string(variant) == "other_reader") {
      extra = "%n = aten::neg(%g32) : f32[8]@cuda:0";
      out_v = "%n";
    } else if (std::string(variant) == "unbatched") {
      extra = "%w = aten::neg(%v2) : f32[8]@cuda:0";
      out_v = "%w";
    } else {
      for (size_t at = text.find("@cuda:0"); at != std::string::npos; at = text.find("@cuda:0")) {
        text.replace(at, 7, "");
      }
    }
    text.replace(text.find("EXTRA"), 5, extra);
    text.replace(text.find("OUT_V"), 5, out_v);
    std::unique_ptr<Module> module = Parse(text);
    ASSERT_NE(module, nullptr) << variant;
    absl::StatusOr<StreamPlan> plan = BuildStreamPlan(*module, *module->FindGraph("train_step"));
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(plan->deferred_casts.empty()) << variant;
    EXPECT_TRUE(plan->bf16_for_f32.empty()) << variant;
  }
}

TEST(StreamPlanTest, AdamWBatchesRunAtTheirLastMemberAndKeepOperandsAlive) {
  std::unique_ptr<Module> module = Parse(R"(module @m {
  graph @opt {
    input %a: f32[4]@cuda:0 {role = param}
    input %ga: f32[4]@cuda:0
    input %ma: f32[4]@cuda:0 {role = opt_state}
    input %va: f32[4]@cuda:0 {role = opt_state}
    input %b: f32[2]@cuda:0 {role = param}
    input %mb: f32[2]@cuda:0 {role = opt_state}
    input %vb: f32[2]@cuda:0 {role = opt_state}
    input %gb0: f32[2]@cuda:0
    input %d: f32[]@cuda:0
    input %s: f32[]@cuda:0
    input %c: f32[]@cuda:0
    %a2, %ma2, %va2 = magi::adamw(%a, %ga, %ma, %va, %d, %s, %c) : f32[4]@cuda:0, f32[4]@cuda:0, f32[4]@cuda:0
    %gb = aten::mul.Tensor(%gb0, %gb0) : f32[2]@cuda:0
    %b2, %mb2, %vb2 = magi::adamw(%b, %gb, %mb, %vb, %d, %s, %c) : f32[2]@cuda:0, f32[2]@cuda:0, f32[2]@cuda:0
    output a = %a2
    output ma = %ma2
    output va = %va2
    output b = %b2
    output mb = %mb2
    output vb = %vb2
    output ga = %ga
  }
}
)");
  ASSERT_NE(module, nullptr);
  absl::StatusOr<StreamPlan> plan = BuildStreamPlan(*module, *module->FindGraph("opt"));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->adamw_batches.size(), 1u);
  EXPECT_EQ(plan->adamw_batches[0].nodes, (std::vector<int>{0, 2}));
  EXPECT_EQ(plan->adamw_batches[0].run_at, 2);
  EXPECT_TRUE(plan->adamw_batches[0].in_place);
  // %a is read by the batch at node 2, so it lives until then.
  EXPECT_TRUE(Released(*plan, 2, "a"));
  EXPECT_FALSE(Released(*plan, 0, "a"));
  // %ga is an output: never released.
  for (const auto& released : plan->release_after) {
    for (const Value* value : released) EXPECT_NE(value->name(), "ga");
  }
}

// Two parameters whose gradients appear in the middle of the backward (b's first), and
// their updates appended after it, as the FSDP rewrite does.
constexpr char kBackward[] = R"(module @m {
  process_group @dp {axis = "dp", size = 1}
  graph @train_step {
    input %x: f32[8,16]@cuda:0
    input %a: f32[16,16]@cuda:0 {role = param}
    input %a.m: f32[16,16]@cuda:0 {role = opt_state}
    input %a.v: f32[16,16]@cuda:0 {role = opt_state}
    input %b: f32[16,16]@cuda:0 {role = param}
    input %b.m: f32[16,16]@cuda:0 {role = opt_state}
    input %b.v: f32[16,16]@cuda:0 {role = opt_state}
    input %decay: f32[]@cuda:0 {role = opt_state}
    input %step_size: f32[]@cuda:0 {role = opt_state}
    input %bc2: f32[]@cuda:0 {role = opt_state}
    %h = aten::mm(%x, %a) : f32[8,16]@cuda:0
    %y = aten::mm(%h, %b) : f32[8,16]@cuda:0
    %ht = aten::t(%h) : f32[16,8]strides[1,16]@cuda:0
    %gb = aten::mm(%ht, %y) : f32[16,16]@cuda:0
    %gh = aten::mm(%y, %b) : f32[8,16]@cuda:0
    %xt = aten::t(%x) : f32[16,8]strides[1,16]@cuda:0
    %ga = aten::mm(%xt, %gh) : f32[16,16]@cuda:0
    %a2, %am2, %av2 = magi::adamw(%a, %ga, %a.m, %a.v, %decay, %step_size, %bc2) : f32[16,16]@cuda:0, f32[16,16]@cuda:0, f32[16,16]@cuda:0
    %b2, %bm2, %bv2 = magi::adamw(%b, %gb, %b.m, %b.v, %decay, %step_size, %bc2) : f32[16,16]@cuda:0, f32[16,16]@cuda:0, f32[16,16]@cuda:0
    output loss = %y
    output a = %a2
    output a.exp_avg = %am2
    output a.exp_avg_sq = %av2
    output b = %b2
    output b.exp_avg = %bm2
    output b.exp_avg_sq = %bv2
  }
}
)";

bool ReleasedAtEnd(const StreamPlan& plan, const std::string& name) {
  for (const Value* value : plan.release_at_end) {
    if (value->name() == name) return true;
  }
  return false;
}

TEST(StreamPlanTest, OverlappedAdamWRunsOnTheOptimizerStreamOnceItsGradientExists) {
  std::unique_ptr<Module> module = Parse(kBackward);
  ASSERT_NE(module, nullptr);
  StreamPlanOptions options;
  options.overlap_optimizer = true;
  options.min_overlap_batch_elements = 1;  // every ready point its own batch
  absl::StatusOr<StreamPlan> plan = BuildStreamPlan(*module, *module->FindGraph("train_step"), options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Nodes: 0 h, 1 y, 2 ht, 3 gb, 4 gh (the last read of b), 5 xt, 6 ga, 7 adamw a, 8 adamw b.
  ASSERT_EQ(plan->adamw_batches.size(), 2u) << plan->Summary();
  EXPECT_EQ(plan->overlapped_batches, 2);
  // b's gradient exists after node 3, but node 4 still reads b: its update waits for 4.
  EXPECT_EQ(plan->adamw_batches[0].nodes, std::vector<int>{8});
  EXPECT_EQ(plan->adamw_batches[0].run_at, 4);
  EXPECT_EQ(plan->adamw_batches[1].nodes, std::vector<int>{7});
  EXPECT_EQ(plan->adamw_batches[1].run_at, 6);
  for (const AdamWBatch& batch : plan->adamw_batches) {
    EXPECT_TRUE(batch.on_optimizer_stream);
    EXPECT_TRUE(batch.in_place);
  }
  EXPECT_EQ(plan->optimizer_batches_after[4], std::vector<int>{0});
  EXPECT_EQ(plan->optimizer_batches_after[6], std::vector<int>{1});
  // What the batches read is held until the join, never released on the compute stream.
  for (const char* name : {"ga", "gb", "a", "b", "a.m", "b.v", "decay"}) {
    EXPECT_TRUE(ReleasedAtEnd(*plan, name)) << name;
    for (const auto& released : plan->release_after) {
      for (const Value* value : released) EXPECT_NE(value->name(), name);
    }
  }
  EXPECT_TRUE(Released(*plan, 4, "gh") || Released(*plan, 6, "gh"));
  EXPECT_TRUE(plan->capturable());
  EXPECT_NE(plan->Summary().find("2 multi-tensor batches (in place) on the optimizer stream, overlapping the backward"),
            std::string::npos)
      << plan->Summary();
}

TEST(StreamPlanTest, OverlappedAdamWBatchesHoldAMinimumOfParameters) {
  std::unique_ptr<Module> module = Parse(kBackward);
  ASSERT_NE(module, nullptr);
  StreamPlanOptions options;
  options.overlap_optimizer = true;
  options.min_overlap_batch_elements = 512;  // both parameters (256 elements each) in one launch
  absl::StatusOr<StreamPlan> plan = BuildStreamPlan(*module, *module->FindGraph("train_step"), options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->adamw_batches.size(), 1u);
  EXPECT_EQ(plan->adamw_batches[0].nodes, (std::vector<int>{7, 8}));
  EXPECT_EQ(plan->adamw_batches[0].run_at, 6);
  EXPECT_TRUE(plan->adamw_batches[0].on_optimizer_stream);
}

TEST(StreamPlanTest, NoOverlapWithoutDonationOrWhenStateIsAnOutput) {
  std::unique_ptr<Module> module = Parse(kBackward);
  ASSERT_NE(module, nullptr);
  StreamPlanOptions options;
  options.overlap_optimizer = true;
  options.donate_optimizer_state = false;
  absl::StatusOr<StreamPlan> plan = BuildStreamPlan(*module, *module->FindGraph("train_step"), options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->overlapped_batches, 0);
  ASSERT_EQ(plan->adamw_batches.size(), 1u);
  EXPECT_EQ(plan->adamw_batches[0].run_at, 8);  // at its last member, on the compute stream
  EXPECT_FALSE(plan->adamw_batches[0].on_optimizer_stream);
  EXPECT_TRUE(plan->release_at_end.empty());

  // A parameter that the step also returns as it was cannot be overwritten.
  std::string text = kBackward;
  text.replace(text.find("    output loss = %y\n"), 0, "    output a.before = %a\n");
  std::unique_ptr<Module> returned = Parse(text);
  ASSERT_NE(returned, nullptr);
  options.donate_optimizer_state = true;
  absl::StatusOr<StreamPlan> kept = BuildStreamPlan(*returned, *returned->FindGraph("train_step"), options);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->overlapped_batches, 0);
  EXPECT_FALSE(kept->adamw_batches[0].in_place);
}

TEST(StreamPlanTest, OverlapOverCollectivesWaitsForTheReduceScatter) {
  std::unique_ptr<Module> module = Parse(kStep);
  ASSERT_NE(module, nullptr);
  StreamPlanOptions options;
  options.overlap_optimizer = true;
  absl::StatusOr<StreamPlan> plan = BuildStreamPlan(*module, *module->FindGraph("train_step"), options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // 0 cast, 1 ag start, 2 wait, 3 mm, 4 cast, 5 pad, 6 rs start, 7 wait, 8 adamw: the shard is
  // read by the gather until its wait (2); the gradient exists at the reduce-scatter's wait.
  ASSERT_EQ(plan->adamw_batches.size(), 1u);
  EXPECT_EQ(plan->adamw_batches[0].run_at, 7);
  EXPECT_TRUE(plan->adamw_batches[0].on_optimizer_stream);
  EXPECT_TRUE(ReleasedAtEnd(*plan, "gs"));
  EXPECT_FALSE(Released(*plan, 8, "w.shard"));
}

// Replaces the first `from` in `text` by `to` (the test graphs' variants).
std::string Replaced(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

absl::StatusOr<StreamPlan> OverlapPlan(const Module& module, int64_t min_elements = 1) {
  StreamPlanOptions options;
  options.overlap_optimizer = true;
  options.min_overlap_batch_elements = min_elements;
  return BuildStreamPlan(module, *module.FindGraph("train_step"), options);
}

// A read of the parameter through a view (b^T) after b's gradient exists: the update
// waits for it (the view shares b's memory, which the update overwrites).
TEST(StreamPlanTest, OverlapWaitsForReadsThroughViews) {
  std::string text = Replaced(kBackward, "    %gh = aten::mm(%y, %b) : f32[8,16]@cuda:0\n",
                              "    %bt = aten::t(%b) : f32[16,16]strides[1,16]@cuda:0\n"
                              "    %gh = aten::mm(%y, %bt) : f32[8,16]@cuda:0\n");
  std::unique_ptr<Module> module = Parse(text);
  ASSERT_NE(module, nullptr);
  absl::StatusOr<StreamPlan> plan = OverlapPlan(*module);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // 0 h, 1 y, 2 ht, 3 gb, 4 bt (a view of b), 5 gh (reads bt), 6 xt, 7 ga, 8 adamw a, 9 adamw b.
  ASSERT_EQ(plan->adamw_batches.size(), 2u);
  EXPECT_EQ(plan->adamw_batches[0].nodes, std::vector<int>{9});
  EXPECT_EQ(plan->adamw_batches[0].run_at, 5);
}

// Over one rank a skipped all-gather's result IS its input: reading the gathered
// parameter reads the shard, so the shard's update waits for the last such read.
TEST(StreamPlanTest, OverlapWaitsForReadsOfASkippedGathersResult) {
  std::unique_ptr<Module> module = Parse(R"(module @m {
  process_group @dp {axis = "dp", size = 1}
  graph @train_step {
    input %x: f32[8,16]@cuda:0
    input %w.shard: f32[16,16]@cuda:0 {role = param}
    input %w.m: f32[16,16]@cuda:0 {role = opt_state}
    input %w.v: f32[16,16]@cuda:0 {role = opt_state}
    input %decay: f32[]@cuda:0 {role = opt_state}
    input %step_size: f32[]@cuda:0 {role = opt_state}
    input %bc2: f32[]@cuda:0 {role = opt_state}
    %f = magi::all_gather_start([%w.shard], group = "dp") : future<f32[16,16]@cuda:0>
    %w = magi::wait(%f) : f32[16,16]@cuda:0
    %y = aten::mm(%x, %w) : f32[8,16]@cuda:0
    %xt = aten::t(%x) : f32[16,8]strides[1,16]@cuda:0
    %g = aten::mm(%xt, %y) : f32[16,16]@cuda:0
    %gx = aten::mm(%y, %w) : f32[8,16]@cuda:0
    %p2, %m2, %v2 = magi::adamw(%w.shard, %g, %w.m, %w.v, %decay, %step_size, %bc2) : f32[16,16]@cuda:0, f32[16,16]@cuda:0, f32[16,16]@cuda:0
    output gx = %gx
    output w.shard = %p2
    output w.exp_avg = %m2
    output w.exp_avg_sq = %v2
  }
}
)");
  ASSERT_NE(module, nullptr);
  absl::StatusOr<StreamPlan> plan = OverlapPlan(*module);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // 0 start, 1 wait, 2 y, 3 xt, 4 g (the gradient), 5 gx (reads %w: the shard's memory), 6 adamw.
  ASSERT_EQ(plan->adamw_batches.size(), 1u);
  EXPECT_EQ(plan->adamw_batches[0].run_at, 5);
}

// Members with other scalars batch apart; a step whose state is read after its update
// (or whose state is not fp32 on CUDA) is not overlapped at all.
TEST(StreamPlanTest, OverlapBatchesByScalarsAndRefusesWhatItCannotRunThere) {
  std::string two_classes = Replaced(kBackward, "    input %bc2: f32[]@cuda:0 {role = opt_state}\n",
                                     "    input %bc2: f32[]@cuda:0 {role = opt_state}\n"
                                     "    input %decay_b: f32[]@cuda:0 {role = opt_state}\n");
  two_classes =
      Replaced(two_classes, "magi::adamw(%b, %gb, %b.m, %b.v, %decay,", "magi::adamw(%b, %gb, %b.m, %b.v, %decay_b,");
  std::unique_ptr<Module> module = Parse(two_classes);
  ASSERT_NE(module, nullptr);
  absl::StatusOr<StreamPlan> plan = OverlapPlan(*module, /*min_elements=*/1 << 20);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->adamw_batches.size(), 2u);  // would be one launch with the same scalars
  EXPECT_EQ(plan->overlapped_batches, 2);

  std::string read_after = Replaced(kBackward, "    output loss = %y\n",
                                    "    %late = aten::add.Tensor(%a, %a, alpha = 1) : f32[16,16]@cuda:0\n"
                                    "    output loss = %y\n    output late = %late\n");
  std::unique_ptr<Module> late = Parse(read_after);
  ASSERT_NE(late, nullptr);
  absl::StatusOr<StreamPlan> late_plan = OverlapPlan(*late);
  ASSERT_TRUE(late_plan.ok()) << late_plan.status();
  EXPECT_EQ(late_plan->overlapped_batches, 0);
  EXPECT_FALSE(late_plan->adamw_batches[0].in_place);  // a's old value is read after the update

  std::string on_cpu = kBackward;
  for (size_t at = on_cpu.find("@cuda:0"); at != std::string::npos; at = on_cpu.find("@cuda:0")) on_cpu.erase(at, 7);
  std::unique_ptr<Module> cpu = Parse(on_cpu);
  ASSERT_NE(cpu, nullptr);
  absl::StatusOr<StreamPlan> cpu_plan = OverlapPlan(*cpu);
  ASSERT_TRUE(cpu_plan.ok()) << cpu_plan.status();
  EXPECT_EQ(cpu_plan->overlapped_batches, 0);  // the fused kernel takes CUDA fp32 only
}

// With deferred gradient casts (mixed precision over one rank) the batches carry the bf16
// gradients; those stay held until the join.
TEST(StreamPlanTest, OverlapWithDeferredGradientCasts) {
  std::string text = Replaced(kBackward, "    %a2, %am2, %av2 = magi::adamw(%a, %ga,",
                              "    %ga16 = aten::_to_copy(%ga, dtype = dtype(bf16)) : bf16[16,16]@cuda:0\n"
                              "    %ga32 = aten::_to_copy(%ga16, dtype = dtype(f32)) : f32[16,16]@cuda:0\n"
                              "    %r = magi::reduce_scatter_start([%ga32], group = \"dp\", reduce_op = \"avg\") : "
                              "future<f32[16,16]@cuda:0>\n"
                              "    %gas = magi::wait(%r) : f32[16,16]@cuda:0\n"
                              "    %a2, %am2, %av2 = magi::adamw(%a, %gas,");
  std::unique_ptr<Module> module = Parse(text);
  ASSERT_NE(module, nullptr);
  absl::StatusOr<StreamPlan> plan = OverlapPlan(*module);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->deferred_casts.size(), 1u) << plan->Summary();
  EXPECT_EQ(plan->overlapped_batches, 2);
  EXPECT_TRUE(ReleasedAtEnd(*plan, "gas"));  // holds the bf16 gradient AdamW reads
}

// (A host result that nothing reads or returns, as efficient attention's philox seed and
// offset, blocks nothing.)
TEST(StreamPlanTest, CaptureBlockersNameTheNodeAndWhy) {
  std::unique_ptr<Module> module = Parse(R"(module @m {
  graph @g {
    input %x: f32[4]@cuda:0
    input %rng: u8[16] {role = rng}
    %n = aten::nonzero(%x) : i64[4,1]@cuda:0
    %y = aten::_to_copy(%x, device = device(cpu)) : f32[4]
    %unread = aten::_to_copy(%x, device = device(cpu)) : f32[4]
    output n = %n
    output y = %y
  }
}
)");
  ASSERT_NE(module, nullptr);
  absl::StatusOr<StreamPlan> plan = BuildStreamPlan(*module, *module->FindGraph("g"));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->capture_blockers.size(), 4u) << plan->Summary();
  EXPECT_NE(plan->capture_blockers[0].reason.find("random ops"), std::string::npos);
  EXPECT_NE(plan->capture_blockers[1].reason.find("%rng is not a CUDA tensor"), std::string::npos);
  EXPECT_EQ(plan->capture_blockers[2].node, 0);
  EXPECT_NE(plan->capture_blockers[2].reason.find("synchronizes with the host"), std::string::npos);
  EXPECT_EQ(plan->capture_blockers[3].node, 1);
  EXPECT_NE(plan->capture_blockers[3].reason.find("off the GPU"), std::string::npos);
  // %unread is on the host too, but nothing reads or returns it: no blocker.
}

// Split masters (magi::adamw_split): batched with each other, not with the plain AdamW,
// updated in place over the donated halves and moments; the gradient cast is deferred
// into the split update as into the plain one.
constexpr char kSplitStep[] = R"(module @m {
  process_group @dp {axis = "dp", size = 1}
  graph @train_step {
    input %a.grad: bf16[8]@cuda:0
    input %b.grad: f32[8]@cuda:0
    input %c.grad: f32[8]@cuda:0
    input %a.hi: bf16[8]@cuda:0 {role = param}
    input %a.lo: i16[8]@cuda:0 {role = param}
    input %a.m: f32[8]@cuda:0 {role = opt_state}
    input %a.v: f32[8]@cuda:0 {role = opt_state}
    input %b.hi: bf16[8]@cuda:0 {role = param}
    input %b.lo: i16[8]@cuda:0 {role = param}
    input %b.m: f32[8]@cuda:0 {role = opt_state}
    input %b.v: f32[8]@cuda:0 {role = opt_state}
    input %c: f32[8]@cuda:0 {role = param}
    input %c.m: f32[8]@cuda:0 {role = opt_state}
    input %c.v: f32[8]@cuda:0 {role = opt_state}
    input %decay: f32[]@cuda:0 {role = opt_state}
    input %step_size: f32[]@cuda:0 {role = opt_state}
    input %bc2: f32[]@cuda:0 {role = opt_state}
    %ga = aten::_to_copy(%a.grad, dtype = dtype(f32)) : f32[8]@cuda:0
    %r0 = magi::reduce_scatter_start([%ga], group = "dp", reduce_op = "avg") : future<f32[8]@cuda:0>
    %sa = magi::wait(%r0) : f32[8]@cuda:0
    %ah, %al, %am, %av = magi::adamw_split(%a.hi, %a.lo, %sa, %a.m, %a.v, %decay, %step_size, %bc2) : bf16[8]@cuda:0, i16[8]@cuda:0, f32[8]@cuda:0, f32[8]@cuda:0
    %bh, %bl, %bm, %bv = magi::adamw_split(%b.hi, %b.lo, %b.grad, %b.m, %b.v, %decay, %step_size, %bc2) : bf16[8]@cuda:0, i16[8]@cuda:0, f32[8]@cuda:0, f32[8]@cuda:0
    %c2, %cm, %cv = magi::adamw(%c, %c.grad, %c.m, %c.v, %decay, %step_size, %bc2) : f32[8]@cuda:0, f32[8]@cuda:0, f32[8]@cuda:0
    output a.hi = %ah {aliases = %a.hi}
    output a.lo = %al {aliases = %a.lo}
    output a.m = %am {aliases = %a.m}
    output a.v = %av {aliases = %a.v}
    output c = %c2 {aliases = %c}
    output c.m = %cm {aliases = %c.m}
    output c.v = %cv {aliases = %c.v}
    output b.hi = %bh {aliases = %b.hi}
    output b.lo = %bl {aliases = %b.lo}
    output b.m = %bm {aliases = %b.m}
    output b.v = %bv {aliases = %b.v}
  }
}
)";

TEST(StreamPlanTest, SplitAdamWIsBatchedInPlaceAndTakesDeferredGradientCasts) {
  std::unique_ptr<Module> module = Parse(kSplitStep);
  ASSERT_NE(module, nullptr);
  const Graph& graph = *module->FindGraph("train_step");
  absl::StatusOr<StreamPlan> plan = BuildStreamPlan(*module, graph);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Nodes: 0 cast, 1 start, 2 wait, 3 adamw_split a, 4 adamw_split b, 5 adamw c: the split
  // pair in one batch, the plain one (same scalars, next in order) in its own.
  ASSERT_EQ(plan->adamw_batches.size(), 2u) << plan->Summary();
  EXPECT_EQ(plan->adamw_batches[0].nodes, (std::vector<int>{3, 4}));
  EXPECT_EQ(plan->adamw_batches[1].nodes, std::vector<int>{5});
  for (const AdamWBatch& batch : plan->adamw_batches) EXPECT_TRUE(batch.in_place);
  EXPECT_EQ(plan->deferred_casts, std::vector<int>{0});

  // Optimizer overlap: the split ones overlap as plain ones do, in batches of their own.
  StreamPlanOptions overlap;
  overlap.overlap_optimizer = true;
  absl::StatusOr<StreamPlan> overlapped = BuildStreamPlan(*module, graph, overlap);
  ASSERT_TRUE(overlapped.ok()) << overlapped.status();
  EXPECT_EQ(overlapped->overlapped_batches, static_cast<int>(overlapped->adamw_batches.size()));
  for (const AdamWBatch& batch : overlapped->adamw_batches) {
    const bool split = graph.nodes()[batch.nodes.front()]->op() == kAdamWSplitOp;
    for (int member : batch.nodes) EXPECT_EQ(graph.nodes()[member]->op() == kAdamWSplitOp, split);
  }
}

}  // namespace
}  // namespace magi
