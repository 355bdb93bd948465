#include "magi/backend/megakernel/reference_executor.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace magi::megakernel {
namespace {

using at::indexing::Slice;

// As the graph computes it: w * (x * rsqrt(mean(x^2, -1, keepdim) + eps)).
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return (x * (x.pow(2).mean({-1}, /*keepdim=*/true) + eps).rsqrt()) * weight;
}

class Executor {
 public:
  Executor(const Program& program, DecodeTensors& t) : p_(program), m_(program.model), t_(t) {
    const at::TensorOptions options = t.embedding.options();
    hidden_ = at::zeros({m_.batch, m_.dim}, options);
    qkv_ = at::zeros({m_.batch, m_.qkv_rows()}, options);
    attention_ = at::zeros({m_.batch, m_.n_heads * m_.head_dim}, options);
    activation_ = at::zeros({m_.batch, m_.ffn_hidden}, options);
    logits_ = at::zeros({m_.batch, m_.vocab}, options);
    next_token_ = at::zeros({m_.batch}, t.tokens.options());
    // fp32 whatever the model's dtype: a part's max score and its sums must agree exactly.
    partials_ = at::zeros({m_.batch, m_.n_heads * program.attention_splits * (m_.head_dim + 2)},
                          options.dtype(at::kFloat));
    const at::Tensor positions = t.positions.to(at::kLong);
    cos_ = t.rope_cos.index_select(0, positions);  // [batch, head_dim / 2]
    sin_ = t.rope_sin.index_select(0, positions);
    positions_ = positions.contiguous();
  }

  void Run(const Instruction& in) {
    const int64_t r0 = in.row_begin, r1 = in.row_end, hd = m_.head_dim;
    switch (in.opcode) {
      case Opcode::kEmbed:
        hidden_.index_put_({Slice(), Slice(r0, r1)},
                           t_.embedding.index_select(0, t_.tokens.reshape({-1})).index({Slice(), Slice(r0, r1)}));
        break;
      case Opcode::kQkv: {
        const DecodeTensors::Layer& layer = t_.layers[in.layer];
        const at::Tensor x = RmsNorm(hidden_, layer.attention_norm, layer.attention_eps);
        qkv_.index_put_({Slice(), Slice(r0, r1)}, at::mm(x, layer.qkv.index({Slice(r0, r1)}).t()));
        break;
      }
      case Opcode::kAttention: {
        const DecodeTensors::Layer& layer = t_.layers[in.layer];
        const int64_t g = r0, b = in.batch_begin, group = m_.group_size();
        const int64_t k_row = m_.n_heads * hd, v_row = (m_.n_heads + m_.n_kv_heads) * hd;
        const at::Tensor q = Rope(qkv_.index({b, Slice(g * group * hd, (g + 1) * group * hd)}).reshape({group, hd}), b);
        const at::Tensor k = Rope(qkv_.index({b, Slice(k_row + g * hd, k_row + (g + 1) * hd)}).reshape({1, hd}), b);
        const at::Tensor v = qkv_.index({b, Slice(v_row + g * hd, v_row + (g + 1) * hd)});
        // The step's key and value into the caches (handles: written through), then attention.
        layer.key_cache.select(0, b).select(0, g).select(0, Position(b)).copy_(k[0]);
        layer.value_cache.select(0, b).select(0, g).select(0, Position(b)).copy_(v);
        const at::Tensor keys = layer.key_cache.index({b, g});    // [window, head_dim]
        const at::Tensor values = layer.value_cache.index({b, g});
        at::Tensor scores = at::mm(q, keys.t()) / std::sqrt(static_cast<double>(hd));  // [group, window]
        const at::Tensor visible = at::arange(m_.window, positions_.options()).le(Position(b));
        scores = scores.masked_fill(visible.logical_not(), -INFINITY);
        const at::Tensor out = at::mm(at::softmax(scores, -1), values);  // [group, head_dim]
        attention_.index_put_({b, Slice(g * group * hd, (g + 1) * group * hd)}, out.reshape({-1}));
        break;
      }
      case Opcode::kAttentionPart:
        AttendPart(in);
        break;
      case Opcode::kAttentionCombine:
        Combine(in);
        break;
      case Opcode::kOProj:
        AddRows(r0, r1, at::mm(attention_, t_.layers[in.layer].o.index({Slice(r0, r1)}).t()));
        break;
      case Opcode::kGateUp: {
        const DecodeTensors::Layer& layer = t_.layers[in.layer];
        const at::Tensor x = RmsNorm(hidden_, layer.ffn_norm, layer.ffn_eps);
        const at::Tensor gate = at::mm(x, layer.gate_up.index({Slice(r0, r1)}).t());
        const at::Tensor up = at::mm(x, layer.gate_up.index({Slice(m_.ffn_hidden + r0, m_.ffn_hidden + r1)}).t());
        activation_.index_put_({Slice(), Slice(r0, r1)}, at::silu(gate) * up);
        break;
      }
      case Opcode::kDown:
        AddRows(r0, r1, at::mm(activation_, t_.layers[in.layer].down.index({Slice(r0, r1)}).t()));
        break;
      case Opcode::kLogits: {
        const at::Tensor x = RmsNorm(hidden_, t_.final_norm, t_.final_eps);
        logits_.index_put_({Slice(), Slice(r0, r1)}, at::mm(x, t_.lm_head.index({Slice(r0, r1)}).t()));
        break;
      }
      case Opcode::kArgmax:
        next_token_.index_put_({in.batch_begin}, logits_[in.batch_begin].argmax());
        break;
    }
  }

  ReferenceResult Result() const { return {logits_.reshape({m_.batch, 1, m_.vocab}), next_token_, {}}; }

 private:
  int64_t Position(int64_t b) const { return positions_[b].item<int64_t>(); }

  // Sequence b's rows x [heads, head_dim] rotated at its position: cat(x1 * cos - x2 * sin,
  // x2 * cos + x1 * sin) over the halves of the last dim.
  at::Tensor Rope(const at::Tensor& x, int64_t b) const {
    const int64_t half = m_.head_dim / 2;
    const at::Tensor cos = cos_[b].unsqueeze(0), sin = sin_[b].unsqueeze(0);
    const at::Tensor x1 = x.index({Slice(), Slice(0, half)}), x2 = x.index({Slice(), Slice(half, 2 * half)});
    return at::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
  }

  // Part in.part of the positions 0..position of (kv group, sequence): the step's key and
  // value (rotated, rounded to the cache's dtype) at the step's position, the cache's before
  // it. Per query head: the part's max score, sum of exp(score - max) and those weights times
  // the values (an empty part: -inf, 0, 0).
  void AttendPart(const Instruction& in) {
    const DecodeTensors::Layer& layer = t_.layers[in.layer];
    const int64_t g = in.row_begin, b = in.batch_begin, group = m_.group_size(), hd = m_.head_dim;
    const int64_t splits = p_.attention_splits, position = Position(b), visible = position + 1;
    const int64_t chunk = (visible + splits - 1) / splits;
    const int64_t p0 = std::min(visible, in.part * chunk), p1 = std::min(visible, (in.part + 1) * chunk);
    const int64_t k_row = m_.n_heads * hd, v_row = (m_.n_heads + m_.n_kv_heads) * hd;
    for (int64_t j = 0; j < group; ++j) {
      const int64_t h = g * group + j, row = (h * splits + in.part) * (hd + 2);
      at::Tensor partial = partials_[b].narrow(0, row, hd + 2);
      if (p0 == p1) {
        partial.fill_(0);
        partial[0] = -INFINITY;
        continue;
      }
      at::Tensor keys = layer.key_cache.index({b, g, Slice(p0, p1)}).clone();
      at::Tensor values = layer.value_cache.index({b, g, Slice(p0, p1)}).clone();
      if (position >= p0 && position < p1) {
        keys[position - p0].copy_(Rope(qkv_.index({b, Slice(k_row + g * hd, k_row + (g + 1) * hd)}).reshape({1, hd}), b)[0]);
        values[position - p0].copy_(qkv_.index({b, Slice(v_row + g * hd, v_row + (g + 1) * hd)}));
      }
      const at::Tensor q = Rope(qkv_.index({b, Slice(h * hd, (h + 1) * hd)}).reshape({1, hd}), b).to(at::kFloat);
      const at::Tensor scores = at::mm(q, keys.to(at::kFloat).t())[0] / std::sqrt(static_cast<double>(hd));
      const at::Tensor most = scores.max();
      const at::Tensor weights = (scores - most).exp();
      partial[0] = most;
      partial[1] = weights.sum();
      partial.narrow(0, 2, hd).copy_(at::mv(values.to(at::kFloat).t(), weights));
    }
  }

  // The step's key and value into the caches; each query head of the group: its parts rescaled
  // to the largest max score and added, over the sum of exponentials.
  void Combine(const Instruction& in) {
    const DecodeTensors::Layer& layer = t_.layers[in.layer];
    const int64_t g = in.row_begin, b = in.batch_begin, group = m_.group_size(), hd = m_.head_dim;
    const int64_t splits = p_.attention_splits;
    const int64_t k_row = m_.n_heads * hd, v_row = (m_.n_heads + m_.n_kv_heads) * hd;
    const at::Tensor k = Rope(qkv_.index({b, Slice(k_row + g * hd, k_row + (g + 1) * hd)}).reshape({1, hd}), b);
    layer.key_cache.select(0, b).select(0, g).select(0, Position(b)).copy_(k[0]);
    layer.value_cache.select(0, b).select(0, g).select(0, Position(b))
        .copy_(qkv_.index({b, Slice(v_row + g * hd, v_row + (g + 1) * hd)}));
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      const at::Tensor parts = partials_[b].narrow(0, h * splits * (hd + 2), splits * (hd + 2)).view({splits, hd + 2});
      const at::Tensor most = parts.select(1, 0);
      const at::Tensor scale = (most - most.max()).exp();  // an empty part's -inf: 0
      const at::Tensor sum = (parts.select(1, 1) * scale).sum();
      const at::Tensor out = (parts.narrow(1, 2, hd) * scale.unsqueeze(1)).sum(0) / sum;
      attention_.index_put_({b, Slice(h * hd, (h + 1) * hd)}, out.to(attention_.scalar_type()));
    }
  }

  void AddRows(int64_t r0, int64_t r1, const at::Tensor& branch) {
    hidden_.index_put_({Slice(), Slice(r0, r1)}, hidden_.index({Slice(), Slice(r0, r1)}) + branch);
  }

  const Program& p_;
  const DecodeModel& m_;
  DecodeTensors& t_;
  at::Tensor hidden_, qkv_, attention_, activation_, logits_, next_token_, cos_, sin_, positions_, partials_;
};

}  // namespace

absl::StatusOr<DecodeTensors> BindDecodeTensors(const DecodeGraphMatch& match, const Graph& graph,
                                                const std::vector<at::Tensor>& inputs) {
  if (inputs.size() != graph.inputs().size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("@", graph.name(), " takes ", graph.inputs().size(), " inputs, not ", inputs.size()));
  }
  absl::flat_hash_map<const Value*, at::Tensor> by_value;
  for (size_t i = 0; i < inputs.size(); ++i) by_value[graph.inputs()[i]] = inputs[i];
  auto get = [&](const Value* value) { return by_value.at(value); };
  DecodeTensors t;
  t.tokens = get(match.tokens);
  t.positions = get(match.positions);
  t.rope_cos = get(match.rope_cos);
  t.rope_sin = get(match.rope_sin);
  t.embedding = get(match.embedding);
  t.final_norm = get(match.final_norm);
  t.lm_head = get(match.lm_head);
  t.final_eps = match.final_eps;
  for (const DecodeLayerBinding& binding : match.layers) {
    t.layers.push_back({get(binding.attention_norm), get(binding.qkv_weight), get(binding.o_weight),
                        get(binding.ffn_norm), get(binding.gate_up_weight), get(binding.down_weight),
                        get(binding.key_cache), get(binding.value_cache), binding.attention_eps, binding.ffn_eps});
  }
  return t;
}

absl::StatusOr<ReferenceResult> RunReference(const Program& program, DecodeTensors& tensors, uint64_t order_seed) {
  Executor executor(program, tensors);
  std::vector<int> order;
  if (order_seed == 0) {
    for (size_t i = 0; i < program.instructions.size(); ++i) order.push_back(static_cast<int>(i));
  } else {
    std::mt19937_64 random(order_seed);
    std::vector<size_t> next(program.queues.size(), 0);
    std::vector<int> count(program.counters.size(), 0);
    while (order.size() < program.instructions.size()) {
      std::vector<int> ready;  // SMs whose next instruction may start
      for (size_t sm = 0; sm < program.queues.size(); ++sm) {
        if (next[sm] == program.queues[sm].size()) continue;
        const Instruction& in = program.instructions[program.queues[sm][next[sm]]];
        bool met = true;
        for (int c : in.waits) met = met && count[c] == program.counters[c].increments;
        if (met) ready.push_back(static_cast<int>(sm));
      }
      if (ready.empty()) return absl::FailedPreconditionError("the program deadlocks: no SM's next instruction can start");
      const int sm = ready[random() % ready.size()];
      const int i = program.queues[sm][next[sm]++];
      order.push_back(i);
      for (int c : program.instructions[i].signals) ++count[c];
    }
  }
  for (int i : order) executor.Run(program.instructions[i]);
  ReferenceResult result = executor.Result();
  result.order = std::move(order);
  return result;
}

}  // namespace magi::megakernel
