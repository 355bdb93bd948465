#include "magi/passes/fsdp/shard_for_fsdp.h"

#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "magi/analysis/memory_plan.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/collectives.h"
#include "magi/ir/magi_ops.h"
#include "magi/passes/reshard_after_forward.h"
#include "magi/ir/parser.h"
#include "magi/ir/printer.h"
#include "magi/ir/verifier.h"

namespace magi {
namespace {

// A two-layer step as capture writes it (fwd/bwd phases, parameter inputs, grad outputs).
constexpr absl::string_view kStep = R"(module @m {
  graph @train_step {
    input %w1: f32[5,4] {role = param}
    input %w2: f32[3,5] {role = param}
    input %x: f32[2,4]
    %t1 = aten::t(%w1) : f32[4,5]strides[1,4] {module = "l1", phase = fwd}
    %h = aten::mm(%x, %t1) : f32[2,5] {module = "l1", phase = fwd}
    %t2 = aten::t(%w2) : f32[5,3]strides[1,5] {module = "l2", phase = fwd}
    %y = aten::mm(%h, %t2) : f32[2,3] {module = "l2", phase = fwd}
    %loss = aten::sum(%y, none) : f32[] {phase = fwd}
    %gy = aten::mul.Scalar(%y, 0.0) : f32[2,3] {phase = bwd}
    %gyt = aten::t(%gy) : f32[3,2]strides[1,3] {phase = bwd}
    %gw2 = aten::mm(%gyt, %h) : f32[3,5] {module = "l2", phase = bwd}
    %gh = aten::mm(%gy, %w2) : f32[2,5] {module = "l2", phase = bwd}
    %ght = aten::t(%gh) : f32[5,2]strides[1,5] {phase = bwd}
    %gw1 = aten::mm(%ght, %x) : f32[5,4] {module = "l1", phase = bwd}
    output loss = %loss
    output w1.grad = %gw1
    output w2.grad = %gw2
  }
}
)";

struct Counts {
  int gathers = 0, reduce_scatters = 0, waits = 0, adamw = 0;
};

Counts Count(const Graph& graph) {
  Counts c;
  for (const Node* node : graph.nodes()) {
    c.gathers += node->op() == kAllGatherStartOp;
    c.reduce_scatters += node->op() == kReduceScatterStartOp;
    c.waits += node->op() == kWaitOp;
    c.adamw += node->op() == "magi::adamw";
  }
  return c;
}

std::unique_ptr<Module> Shard(const FsdpPlan& plan, absl::string_view step = kStep) {
  auto module = ParseModule(step);
  EXPECT_TRUE(module.ok()) << module.status();
  absl::Status status = ShardForFsdp(**module, *(*module)->FindGraph("train_step"), plan);
  EXPECT_TRUE(status.ok()) << status;
  absl::Status verified = VerifyModule(**module);
  EXPECT_TRUE(verified.ok()) << verified << "\n" << PrintModule(**module);
  return *std::move(module);
}

FsdpPlan TwoGroups(bool reshard_l2) {
  FsdpPlan plan;
  plan.world_size = 2;
  plan.groups = {{"l1", {"w1"}, true}, {"l2", {"w2"}, reshard_l2}};
  return plan;
}

TEST(ShardForFsdpTest, ShardsGathersReducesAndStepsInOneGraph) {
  std::unique_ptr<Module> module = Shard(TwoGroups(/*reshard_l2=*/true));
  Graph* graph = module->FindGraph("train_step");
  EXPECT_EQ(graph->FindValue("w1"), nullptr);
  EXPECT_EQ(graph->FindValue("w1.shard")->type().ToString(), "f32[3,4]");  // ceil(5/2) rows
  EXPECT_EQ(graph->FindValue("w2.shard")->type().ToString(), "f32[2,5]");
  EXPECT_EQ(module->FindProcessGroup("dp")->size, 2);
  Counts c = Count(*graph);
  EXPECT_EQ(c.gathers, 3);  // l1 forward, l2 forward, l2 again in backward (resharded)
  EXPECT_EQ(c.reduce_scatters, 2);
  EXPECT_EQ(c.waits, 5);
  EXPECT_EQ(c.adamw, 2);  // one magi::adamw per parameter
  std::vector<std::string> outputs;
  for (const GraphOutput& o : graph->outputs()) outputs.push_back(o.name);
  EXPECT_EQ(outputs, (std::vector<std::string>{"loss", "w1.shard", "w1.exp_avg", "w1.exp_avg_sq", "w2.shard",
                                               "w2.exp_avg", "w2.exp_avg_sq"}));
  std::string text = PrintModule(*module);
  // The padded gradient of w1 (5 rows -> 6) and the slice of the gathered weight back to 5.
  EXPECT_NE(text.find("aten::constant_pad_nd(%gw1, [0, 0, 0, 1], 0) : f32[6,4]"), std::string::npos) << text;
  EXPECT_NE(text.find("aten::slice.Tensor("), std::string::npos);
  EXPECT_NE(text.find("reduce_op = \"avg\""), std::string::npos);
}

TEST(ShardForFsdpTest, KeepingGatheredParametersSkipsTheBackwardGather) {
  std::unique_ptr<Module> module = Shard(TwoGroups(/*reshard_l2=*/false));
  EXPECT_EQ(Count(*module->FindGraph("train_step")).gathers, 2);
}

TEST(ShardForFsdpTest, WorldOfOneAndMixedPrecision) {
  FsdpPlan plan = TwoGroups(true);
  plan.world_size = 1;
  plan.optimizer = false;
  plan.reduce_dtype = DType::kFloat64;
  std::unique_ptr<Module> module = Shard(plan);
  Graph* graph = module->FindGraph("train_step");
  EXPECT_EQ(graph->FindValue("w1.shard")->type().ToString(), "f32[5,4]");
  ASSERT_GE(graph->FindOutput("w1.grad.shard"), 0);
  // Reduced in f64, cast back to the shard's f32.
  EXPECT_EQ(graph->outputs()[graph->FindOutput("w1.grad.shard")].value->type().ToString(), "f32[5,4]");
  EXPECT_NE(PrintModule(*module).find("future<f64[5,4]>"), std::string::npos);
}

TEST(ShardForFsdpTest, BadPlans) {
  auto module = ParseModule(kStep);
  ASSERT_TRUE(module.ok());
  Graph* graph = (*module)->FindGraph("train_step");
  FsdpPlan twice = TwoGroups(true);
  twice.groups[1].params.push_back("w1");
  EXPECT_EQ(ShardForFsdp(**module, *graph, twice).message(), "parameter w1 is in two FSDP groups");
  FsdpPlan missing = TwoGroups(true);
  missing.groups[0].params = {"w9"};
  EXPECT_EQ(ShardForFsdp(**module, *graph, missing).message(), "FSDP group 'l1': no parameter input %w9");
}

// The new state aliases the old (donation), so AdamW may update it in place.
TEST(ShardForFsdpTest, StateOutputsAliasTheirInputs) {
  std::unique_ptr<Module> module = Shard(TwoGroups(true));
  const Graph& graph = *module->FindGraph("train_step");
  for (const char* name : {"w1.shard", "w1.exp_avg", "w1.exp_avg_sq", "w2.shard"}) {
    const GraphOutput& output = graph.outputs()[graph.FindOutput(name)];
    EXPECT_EQ(output.aliases, graph.FindValue(name)) << name;
  }
  EXPECT_EQ(graph.outputs()[graph.FindOutput("loss")].aliases, nullptr);
  FsdpPlan plain = TwoGroups(true);
  plain.donate_state = false;
  std::unique_ptr<Module> undonated = Shard(plain);
  for (const GraphOutput& output : undonated->FindGraph("train_step")->outputs()) EXPECT_EQ(output.aliases, nullptr);
}

// HSDP: reduce-scatter within the shard group, then all-reduce (average) across replicas.
TEST(ShardForFsdpTest, HybridShardingAllReducesAcrossReplicas) {
  FsdpPlan plan = TwoGroups(true);
  plan.process_group = "shard";
  plan.mesh_axis = "shard";
  plan.replicate_size = 2;
  std::unique_ptr<Module> module = Shard(plan);
  EXPECT_EQ(module->FindProcessGroup("shard")->size, 2);
  EXPECT_EQ(module->FindProcessGroup("replicate")->size, 2);
  int all_reduces = 0;
  for (const Node* node : module->FindGraph("train_step")->nodes()) {
    if (node->op() != kAllReduceStartOp) continue;
    ++all_reduces;
    EXPECT_EQ(node->FindArg("group")->as_string(), "replicate");
    EXPECT_EQ(node->FindArg("reduce_op")->as_string(), "avg");
    // Its operands are the reduce-scatter's results.
    EXPECT_EQ(StartOfWait(*node->operand(0)->producer())->op(), kReduceScatterStartOp);
  }
  EXPECT_EQ(all_reduces, 2);  // one per FSDP group
}

// Gradient accumulation: the micro-batch graph reduces and steps nothing and adds its
// gradients to the accumulated ones; the step graph adds them before its reduce-scatter
// and divides the reduced shards by the number of micro-batches.
TEST(ShardForFsdpTest, GradientAccumulation) {
  FsdpPlan accumulate = TwoGroups(true);
  accumulate.gradient_sync = false;
  accumulate.accumulated_gradient_input = true;
  std::unique_ptr<Module> micro = Shard(accumulate);
  const Graph& micro_graph = *micro->FindGraph("train_step");
  Counts c = Count(micro_graph);
  EXPECT_EQ(c.reduce_scatters, 0);
  EXPECT_EQ(c.adamw, 0);
  EXPECT_EQ(micro_graph.FindValue("adamw.decay"), nullptr);
  std::vector<std::string> outputs;
  for (const GraphOutput& o : micro_graph.outputs()) outputs.push_back(o.name);
  EXPECT_EQ(outputs, (std::vector<std::string>{"loss", "w1.grad.acc", "w2.grad.acc"}));
  EXPECT_EQ(micro_graph.FindValue("w1.grad.acc")->type().ToString(), "f32[5,4]");  // unsharded
  EXPECT_EQ(micro_graph.outputs()[1].aliases, micro_graph.FindValue("w1.grad.acc"));

  FsdpPlan step = TwoGroups(true);
  step.accumulated_gradient_input = true;
  step.gradient_divisor = 4;
  std::unique_ptr<Module> module = Shard(step);
  EXPECT_EQ(Count(*module->FindGraph("train_step")).reduce_scatters, 2);
  std::string text = PrintModule(*module);
  EXPECT_NE(text.find("aten::add.Tensor(%w1.grad.acc, %gw1, 1) : f32[5,4]"), std::string::npos) << text;
  EXPECT_NE(text.find("aten::div.Scalar("), std::string::npos) << text;
}

// clip_grad_norm_: squares of every gradient shard summed, all-reduced over the shard
// group, square-rooted (output grad_norm), and min(1, max / (norm + 1e-6)) applied to
// each shard before AdamW.
TEST(ShardForFsdpTest, ClipGradNorm) {
  FsdpPlan plan = TwoGroups(true);
  plan.clip_grad_norm = 1.5;
  std::unique_ptr<Module> module = Shard(plan);
  const Graph& graph = *module->FindGraph("train_step");
  ASSERT_GE(graph.FindOutput("grad_norm"), 0);
  const Value* norm = graph.outputs()[graph.FindOutput("grad_norm")].value;
  EXPECT_EQ(norm->producer()->op(), "aten::sqrt");
  const Node* wait = norm->producer()->operand(0)->producer();
  const Node* start = StartOfWait(*wait);
  EXPECT_EQ(start->op(), kAllReduceStartOp);
  EXPECT_EQ(start->FindArg("group")->as_string(), "dp");
  EXPECT_EQ(start->FindArg("reduce_op")->as_string(), "sum");
  std::string text = PrintModule(*module);
  EXPECT_NE(text.find(", 1.5) : f32[]"), std::string::npos) << text;         // max_norm * 1 / (norm + eps)
  EXPECT_NE(text.find(", none, 1.0) : f32[]"), std::string::npos) << text;  // clamp(max = 1)
  for (const Node* node : graph.nodes()) {
    if (node->op() == "magi::adamw") EXPECT_EQ(node->operand(1)->producer()->op(), "aten::mul.Tensor");
  }
  FsdpPlan no_optimizer = TwoGroups(true);
  no_optimizer.clip_grad_norm = 1.0;
  no_optimizer.optimizer = false;
  auto parsed = ParseModule(kStep);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(ShardForFsdp(**parsed, *(*parsed)->FindGraph("train_step"), no_optimizer).message(),
            "clip_grad_norm clips before the optimizer: it needs optimizer and gradient_sync");
}


// FSDP2's reshard_after_forward=2 on 4 ranks: after forward each rank keeps its half of
// the gathered weights (magi::local_shard over a 2-rank group); backward gathers those
// halves over the 2 ranks, not the shards over 4.
FsdpPlan FourRanks(int64_t post_forward_l1, int64_t post_forward_l2) {
  FsdpPlan plan;
  plan.world_size = 4;
  plan.groups = {{"l1", {"w1"}, true, post_forward_l1}, {"l2", {"w2"}, true, post_forward_l2}};
  return plan;
}

TEST(ShardForFsdpTest, ReshardsToASmallerGroupAfterForward) {
  std::unique_ptr<Module> module = Shard(FourRanks(2, 2));
  const Graph& graph = *module->FindGraph("train_step");
  const ProcessGroup* post_forward = module->FindProcessGroup("dp.post_forward2");
  ASSERT_NE(post_forward, nullptr) << PrintModule(*module);
  EXPECT_EQ(post_forward->size, 2);
  EXPECT_EQ(post_forward->axis, "dp.post_forward2");
  int pieces = 0, backward_gathers = 0;
  for (const Node* node : graph.nodes()) {
    if (node->op() == kLocalShardOp) {
      ++pieces;
      EXPECT_EQ(node->annotations().phase, Phase::kForward);
      EXPECT_EQ(node->FindArg("group")->as_string(), "dp.post_forward2");
      // A piece of the forward gather's (padded) result: w2 has 3 rows -> 4 gathered -> 2 kept.
      EXPECT_EQ(StartOfWait(*node->operand(0)->producer())->FindArg("group")->as_string(), "dp");
    }
    if (node->op() == kAllGatherStartOp && node->annotations().phase == Phase::kBackward) {
      ++backward_gathers;
      EXPECT_EQ(node->FindArg("group")->as_string(), "dp.post_forward2") << node->DebugName();
      EXPECT_EQ(node->operand(0)->producer()->op(), kLocalShardOp);
    }
  }
  EXPECT_EQ(pieces, 1);  // w2 (l1's w1 is not read in backward: nothing to keep)
  EXPECT_EQ(backward_gathers, 1);
  std::string text = PrintModule(*module);
  EXPECT_NE(text.find("group = \"dp.post_forward2\") : f32[2,5] {module = \"l2\", phase = fwd}"), std::string::npos)
      << text;
  EXPECT_NE(text.find("group = \"dp.post_forward2\") : future<f32[4,5]>"), std::string::npos) << text;
}

// Bytes live between forward and backward: shards (true) < halves (2) < whole weights (false).
TEST(ShardForFsdpTest, ReshardingToASmallerGroupKeepsMemoryBetweenTheOtherTwo) {
  FsdpPlan keep = FourRanks(0, 0);
  keep.groups[1].reshard_after_forward = false;
  int64_t live[3];
  int64_t peaks[3];
  int i = 0;
  for (const FsdpPlan& plan : {FourRanks(0, 0), FourRanks(0, 2), keep}) {
    std::unique_ptr<Module> module = Shard(plan);
    const Graph& graph = *module->FindGraph("train_step");
    absl::StatusOr<MemoryPlan> memory = PlanMemory(graph);
    ASSERT_TRUE(memory.ok()) << memory.status();
    std::vector<Node*> nodes = graph.nodes();
    int loss = 0;
    while (nodes[loss]->result(0)->name() != "loss") ++loss;
    live[i] = memory->live_after[loss];
    peaks[i] = memory->peak_bytes;
    ++i;
  }
  EXPECT_LT(live[0], live[1]);
  EXPECT_LT(live[1], live[2]);
  EXPECT_EQ(live[1] - live[0], 2 * 5 * 4);  // w2's kept half: 2 of its 4 padded rows
  EXPECT_EQ(live[2] - live[0], 4 * 5 * 4);  // w2's whole padded gather (the slice is a view of it)
  EXPECT_LE(peaks[0], peaks[1]);
  EXPECT_LE(peaks[1], peaks[2]);
}

// mode=keep turns the smaller-group reshard back into keeping: the backward gather and
// the pieces go, backward reads the forward gather.
TEST(ShardForFsdpTest, KeepingDropsThePostForwardGatherAndPieces) {
  std::unique_ptr<Module> module = Shard(FourRanks(2, 2));
  ReshardAfterForwardOptions keep;
  keep.reshard = false;
  absl::StatusOr<bool> changed = ReshardAfterForward(keep).Run(*module);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  ASSERT_TRUE(VerifyModule(*module).ok());
  for (const Node* node : module->FindGraph("train_step")->nodes()) {
    EXPECT_NE(node->op(), kLocalShardOp);
    if (IsCollectiveStart(node->op())) EXPECT_EQ(node->FindArg("group")->as_string(), "dp");
  }
  EXPECT_EQ(Count(*module->FindGraph("train_step")).gathers, 2);
}

TEST(ShardForFsdpTest, PostForwardSizeMustBeANonTrivialDivisorOfTheShardGroup) {
  for (int64_t size : {1, 3, 4, 8}) {
    auto module = ParseModule(kStep);
    ASSERT_TRUE(module.ok());
    absl::Status status = ShardForFsdp(**module, *(*module)->FindGraph("train_step"), FourRanks(0, size));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(), absl::StrCat("FSDP group 'l2': reshard_after_forward=", size,
                                             " must divide the shard group's 4 ranks and be neither 1 nor 4 (a smaller "
                                             "group to reshard to; true or false otherwise)"));
  }
  FsdpPlan kept = FourRanks(0, 2);
  kept.groups[1].reshard_after_forward = false;
  auto module = ParseModule(kStep);
  ASSERT_TRUE(module.ok());
  EXPECT_EQ(ShardForFsdp(**module, *(*module)->FindGraph("train_step"), kept).message(),
            "FSDP group 'l2': post_forward_size 2 needs reshard_after_forward");
}

// HSDP with a 4-rank shard group: the post-forward group lies within the shard group.
TEST(ShardForFsdpTest, HybridShardingReshardsWithinTheShardGroup) {
  FsdpPlan plan = FourRanks(0, 2);
  plan.process_group = "shard";
  plan.mesh_axis = "shard";
  plan.replicate_size = 2;
  std::unique_ptr<Module> module = Shard(plan);
  ASSERT_NE(module->FindProcessGroup("shard.post_forward2"), nullptr);
  EXPECT_EQ(module->FindProcessGroup("shard.post_forward2")->size, 2);
  for (const Node* node : module->FindGraph("train_step")->nodes()) {
    if (node->op() == kAllGatherStartOp && node->annotations().phase == Phase::kBackward) {
      EXPECT_EQ(node->FindArg("group")->as_string(), "shard.post_forward2");
    }
  }
}

// The same step computing on CUDA.
std::string OnCuda(absl::string_view step) {
  return absl::StrReplaceAll(step, {{"] {", "]@cuda {"}, {"]\n", "]@cuda\n"}});
}

// Bytes of the optimizer's inputs: shards, moments and AdamW's scalars.
int64_t StateBytes(const Graph& graph) {
  int64_t bytes = 0;
  for (const Value* input : graph.inputs()) {
    if (input->role() == InputRole::kParam || input->role() == InputRole::kOptState) {
      bytes += *input->type().tensor().SizeInBytes();
    }
  }
  return bytes;
}

// CPU offload (FSDP2's CPUOffloadPolicy): the master shards, moments and AdamW on the
// host; shards copied to the device before each gather, reduced gradients to the host;
// the device's planned peak drops and the host holds the state.
TEST(ShardForFsdpTest, CpuOffloadKeepsTheOptimizerOnTheHost) {
  const std::string cuda_step = OnCuda(kStep);
  FsdpPlan plan = TwoGroups(/*reshard_l2=*/true);
  plan.clip_grad_norm = 1.0;
  std::unique_ptr<Module> plain = Shard(plan, cuda_step);
  plan.cpu_offload = true;
  std::unique_ptr<Module> offloaded = Shard(plan, cuda_step);
  const Graph& graph = *offloaded->FindGraph("train_step");
  for (const Value* input : graph.inputs()) {
    const bool state = input->role() == InputRole::kParam || input->role() == InputRole::kOptState;
    EXPECT_EQ(input->type().tensor().device.type, state ? DeviceType::kCpu : DeviceType::kCuda) << input->name();
  }
  int adamw = 0;
  for (const Node* node : graph.nodes()) {
    if (node->op() == kAdamWOp) {  // every operand and result on the host
      ++adamw;
      for (const Value* operand : node->operands()) {
        EXPECT_EQ(operand->type().tensor().device.type, DeviceType::kCpu) << operand->name();
      }
      for (const Value* result : node->results()) EXPECT_EQ(result->type().tensor().device.type, DeviceType::kCpu);
      // Its gradient came off the device right after the reduce-scatter (through clipping).
      const Node* clip = node->operand(kAdamWGrad)->producer();
      EXPECT_EQ(clip->op(), "aten::mul.Tensor");
      const Node* copy = clip->operand(0)->producer();
      EXPECT_EQ(copy->op(), "aten::_to_copy");
      EXPECT_EQ(copy->operand(0)->type().tensor().device.type, DeviceType::kCuda);
      EXPECT_EQ(StartOfWait(*copy->operand(0)->producer())->op(), kReduceScatterStartOp);
    }
    if (IsCollectiveStart(node->op())) {  // collectives run on the device
      for (const Value* operand : node->operands()) {
        EXPECT_EQ(operand->type().tensor().device.type, DeviceType::kCuda) << node->DebugName();
      }
    }
    if (node->op() == kAllGatherStartOp) EXPECT_EQ(node->operand(0)->producer()->op(), "aten::_to_copy");
  }
  EXPECT_EQ(adamw, 2);
  std::string text = PrintModule(*offloaded);
  EXPECT_NE(text.find("aten::_to_copy(%w1.shard, dtype = none, layout = none, device = device(cuda)"),
            std::string::npos)
      << text;

  absl::StatusOr<MemoryPlan> before = PlanMemory(*plain->FindGraph("train_step"));
  absl::StatusOr<MemoryPlan> after = PlanMemory(graph);
  ASSERT_TRUE(before.ok() && after.ok());
  const int64_t state = StateBytes(graph);
  EXPECT_EQ(state, 3 * (3 * 4 + 2 * 5) * 4 + 3 * 4);  // shard + 2 moments of w1 [3,4] and w2 [2,5]; 3 scalars
  EXPECT_EQ(before->host_peak_bytes, 0);      // all on the device
  EXPECT_GE(after->host_peak_bytes, state);
  EXPECT_LT(after->peak_bytes, before->peak_bytes);
  // At the end of forward the device holds exactly the state less (the shard copies died
  // with their gathers).
  auto loss_index = [](const Graph& g) {
    std::vector<Node*> nodes = g.nodes();
    int i = 0;
    while (nodes[i]->result(0)->name() != "loss") ++i;
    return i;
  };
  EXPECT_EQ(before->live_after[loss_index(*plain->FindGraph("train_step"))] - after->live_after[loss_index(graph)],
            state);
}

// On a CPU-only step host and device are one: the copies are still made (the graph a GPU
// runs), and there is no separate host account.
TEST(ShardForFsdpTest, CpuOffloadOnTheCpuCopiesWithinOneMemory) {
  FsdpPlan plan = TwoGroups(true);
  plan.cpu_offload = true;
  std::unique_ptr<Module> module = Shard(plan);
  const Graph& graph = *module->FindGraph("train_step");
  int copies = 0;
  for (const Node* node : graph.nodes()) copies += node->op() == "aten::_to_copy";
  EXPECT_EQ(copies, 3 + 2);  // before each of the 3 gathers; after each of the 2 reduce-scatters
  absl::StatusOr<MemoryPlan> memory = PlanMemory(graph);
  ASSERT_TRUE(memory.ok());
  EXPECT_EQ(memory->host_peak_bytes, 0);
  EXPECT_EQ(memory->host_peak_node, -1);
}

}  // namespace
}  // namespace magi
