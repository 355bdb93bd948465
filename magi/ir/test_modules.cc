#include "magi/ir/test_modules.h"

namespace magi::testing {

const absl::string_view kFsdpMlpStepText = R"(module @fsdp_mlp {
  process_group @dp {axis = "dp", size = 2, ranks = [0, 1]}
  graph @train_step {
    input %x: f32[8,16]
    input %target: i64[8]
    input %fc1.weight.shard: f32[16,16] {role = param}
    input %fc2.weight.shard: f32[5,16] {role = param}
    input %seed: i64[] {role = rng}
    %f0, %f1 = magi::all_gather_start([%fc1.weight.shard, %fc2.weight.shard], group = "dp") : future<f32[32,16]>, future<f32[10,16]> {stream = 1, bucket = 0}
    %fc1.weight, %fc2.weight = magi::wait(%f0, %f1) : f32[32,16], f32[10,16] {bucket = 0}
    %w1t = aten::t(%fc1.weight) : f32[16,32]strides[1,16] {module = "fc1"}
    %h = aten::mm(%x, %w1t) : f32[8,32] {module = "fc1", sched = 3}
    %a = aten::gelu(%h, approximate = "tanh") : f32[8,32] {module = "act", remat = recompute}
    %w2t = aten::t(%fc2.weight) : f32[32,10]strides[1,32] {module = "fc2"}
    %logits = aten::mm(%a, %w2t) : f32[8,10] {module = "fc2", remat = save}
    %logp = aten::_log_softmax(%logits, 1, false) : f32[8,10]
    %loss, %total = aten::nll_loss_forward(%logp, %target, none, 1, -100) : f32[], f32[]
    %ones = aten::ones_like(%loss, dtype = none, layout = none, device = device(cpu), pin_memory = none, memory_format = none) : f32[]
    %dlogp = aten::nll_loss_backward(%ones, %logp, %target, none, 1, -100, %total) : f32[8,10]
    %dlogits = aten::_log_softmax_backward_data(%dlogp, %logp, 1, dtype(f32)) : f32[8,10]
    %dlt = aten::t(%dlogits) : f32[10,8]strides[1,10]
    %g2 = aten::mm(%dlt, %a) : f32[10,32]
    %g2s = aten::view(%g2, [10, 32]) : f32[10,32]
    %dummy = aten::cat([%g2s, %g2s], 0) : f32[20,32]
    %idx = aten::index.Tensor(%dummy, [none, %target]) : f32[20,8]
    %scaled = aten::mul.Scalar(%g2s, 0.5) : f32[10,32]
    %clamped = aten::clamp(%scaled, -inf, 1e+30) : f32[10,32]
    %ls = aten::_foreach_add.Scalar([%g2s], 1.0) : f32[10,32]
    %ws = custom::weighted(%g2s, weights = [0.25, 1.5], flags = [true, false], dims = [], name = "quote\"and\\slash\n") : f32[10,32]@cuda:1
    %r0 = magi::reduce_scatter_start([%clamped], group = "dp", reduce_op = "avg") : future<f32[5,32]> {stream = 2}
    %g2.shard = magi::wait(%r0) : f32[5,32]
    output loss = %loss
    output fc2.weight.grad = %g2.shard
    output "odd name" = %idx
  }
}
)";

const absl::string_view kTinyForwardText = R"(module @tiny {
  graph @forward {
    input %x: f32[4,8]
    input %w: f32[8,3] {role = param}
    input %b: f32[3] {role = param}
    %y = aten::addmm(%b, %x, %w, beta = 1, alpha = 1) : f32[4,3] {module = "linear"}
    %z = aten::relu(%y) : f32[4,3] {module = "act"}
    output out = %z
  }
}
)";

}  // namespace magi::testing
