#include "magi/backend/megakernel/decode_pattern.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace magi::megakernel {
namespace {

// ATen's SDPA implementations as the dispatcher records them (CPU, cuDNN, flash, efficient, math).
const absl::flat_hash_set<std::string>& SdpaOps() {
  static const auto* ops = new absl::flat_hash_set<std::string>{
      "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_cudnn_attention",
      "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_flash_attention",
      "aten::_scaled_dot_product_attention_math", "aten::scaled_dot_product_attention"};
  return *ops;
}

// Positions of dropout_p and is_causal in an SDPA op's arguments (ATen's schemas); -1 for an
// op that takes no mask (flash: it cannot express the decode mask).
std::pair<int, int> SdpaArgs(absl::string_view op) {
  if (op == "aten::_scaled_dot_product_flash_attention_for_cpu") return {3, 4};
  if (op == "aten::_scaled_dot_product_cudnn_attention" || op == "aten::_scaled_dot_product_efficient_attention") {
    return {5, 6};
  }
  if (op == "aten::_scaled_dot_product_attention_math" || op == "aten::scaled_dot_product_attention") return {4, 5};
  return {-1, -1};
}

bool IsReshape(const Node* node) {
  return node != nullptr && (node->op() == "aten::view" || node->op() == "aten::_unsafe_view" ||
                             node->op() == "aten::reshape");
}

const std::vector<int64_t>& Sizes(const Value* value) { return value->type().tensor().sizes; }

// A number argument (int or float) of `node`, or nullopt.
std::optional<double> Number(const Node& node, int arg) {
  if (arg >= static_cast<int>(node.args().size())) return std::nullopt;
  const Attribute& value = node.args()[arg].value;
  if (value.kind() == AttrKind::kInt) return static_cast<double>(value.as_int());
  if (value.kind() == AttrKind::kFloat) return value.as_float();
  return std::nullopt;
}

class Matcher {
 public:
  explicit Matcher(const Graph& graph) : graph_(graph) {}

  absl::StatusOr<DecodeGraphMatch> Run() {
    const Node* embedding = nullptr;
    for (Node* node : graph_.nodes()) {
      if (node->op() != "aten::embedding") continue;
      if (embedding != nullptr) return Fail(node->result(0), "one aten::embedding (the token embedding)");
      embedding = node;
    }
    if (embedding == nullptr) return absl::UnimplementedError("the graph has no aten::embedding (the token embedding)");
    match_.embedding = Param(embedding->operand(0), 2);
    match_.tokens = embedding->operand(1);
    if (match_.embedding == nullptr) return Fail(embedding->result(0), "an embedding of a [vocab, dim] parameter");
    if (!match_.tokens->is_graph_input() || Sizes(match_.tokens).size() != 2 || Sizes(match_.tokens)[1] != 1) {
      return Fail(match_.tokens, "the tokens: a graph input [batch, 1]");
    }
    DecodeModel& m = match_.model;
    m.batch = Sizes(match_.tokens)[0];
    m.vocab = Sizes(match_.embedding)[0];
    m.dim = Sizes(match_.embedding)[1];
    m.weight_bytes_per_element = DTypeSize(match_.embedding->type().tensor().dtype);
    const Value* h = embedding->result(0);
    while (true) {
      absl::StatusOr<Norm> norm = MatchRmsNorm(h);
      if (!norm.ok()) return norm.status();
      absl::StatusOr<Linear> linear = MatchLinear(norm->out);
      if (!linear.ok()) return linear.status();
      if (linear->out->uses().size() == 3) {  // q, k and v slices: a layer
        absl::StatusOr<const Value*> next = MatchLayer(h, *norm, *linear);
        if (!next.ok()) return next.status();
        h = *next;
        continue;
      }
      if (absl::Status head = MatchHead(*norm, *linear); !head.ok()) return head;
      break;
    }
    m.n_layers = static_cast<int64_t>(match_.layers.size());
    if (m.n_layers == 0) return absl::UnimplementedError("no transformer layer was matched");
    if (absl::Status valid = m.Validate(); !valid.ok()) return absl::UnimplementedError(valid.message());
    return std::move(match_);
  }

 private:
  struct Norm {
    const Value* out = nullptr;
    const Value* weight = nullptr;
    double eps = 0;
  };
  struct Linear {
    const Value* out = nullptr;     // [rows_of_input, out_features]
    const Value* weight = nullptr;  // [out_features, in_features]
  };

  absl::Status Fail(const Value* at, absl::string_view expected) const {
    return absl::UnimplementedError(absl::StrCat("at %", at->name(), ": expected ", expected));
  }

  // `value` if it is a parameter graph input of rank `rank`, else null.
  static const Value* Param(const Value* value, size_t rank) {
    return value->is_graph_input() && value->role() == InputRole::kParam && Sizes(value).size() == rank ? value : nullptr;
  }

  // The one node that uses `value` with op `op`, or null.
  static const Node* UserWithOp(const Value* value, absl::string_view op) {
    const Node* found = nullptr;
    for (Node* user : value->Users()) {
      if (user->op() != op) continue;
      if (found != nullptr) return nullptr;
      found = user;
    }
    return found;
  }

  // `value`'s sole user, or null.
  static const Node* SoleUser(const Value* value) {
    std::vector<Node*> users = value->Users();
    return users.size() == 1 ? users[0] : nullptr;
  }

  // Follows reshapes (view, _unsafe_view, reshape) that are `value`'s sole user.
  static const Value* SkipReshapes(const Value* value) {
    for (const Node* user = SoleUser(value); IsReshape(user); user = SoleUser(value)) value = user->result(0);
    return value;
  }

  // mul.Tensor(a, b) in either order.
  static bool IsProduct(const Node* node, const Value* a, const Value* b) {
    return node != nullptr && node->op() == "aten::mul.Tensor" && node->num_operands() == 2 &&
           ((node->operand(0) == a && node->operand(1) == b) || (node->operand(0) == b && node->operand(1) == a));
  }

  absl::StatusOr<Norm> MatchRmsNorm(const Value* h) {
    const Node* pow = UserWithOp(h, "aten::pow.Tensor_Scalar");
    if (pow == nullptr || Number(*pow, 1) != 2.0) return Fail(h, "RMSNorm: one aten::pow.Tensor_Scalar(x, 2) of it");
    const Node* mean = SoleUser(pow->result(0));
    const int64_t last = static_cast<int64_t>(Sizes(h).size()) - 1;
    if (mean == nullptr || mean->op() != "aten::mean.dim" || mean->args().size() < 3 ||
        mean->args()[1].value.kind() != AttrKind::kIntList || mean->args()[1].value.as_int_list().size() != 1 ||
        (mean->args()[1].value.as_int_list()[0] != -1 && mean->args()[1].value.as_int_list()[0] != last) ||
        mean->args()[2].value.kind() != AttrKind::kBool || !mean->args()[2].value.as_bool()) {
      return Fail(pow->result(0), "RMSNorm: aten::mean.dim over the last dim, keepdim");
    }
    const Node* add = SoleUser(mean->result(0));
    std::optional<double> eps = add == nullptr ? std::nullopt : Number(*add, 1);
    if (add == nullptr || add->op() != "aten::add.Scalar" || !eps || Number(*add, 2).value_or(1) != 1) {
      return Fail(mean->result(0), "RMSNorm: aten::add.Scalar(mean, eps)");
    }
    const Node* rsqrt = SoleUser(add->result(0));
    if (rsqrt == nullptr || rsqrt->op() != "aten::rsqrt") return Fail(add->result(0), "RMSNorm: aten::rsqrt");
    const Node* scale = SoleUser(rsqrt->result(0));
    if (!IsProduct(scale, h, rsqrt->result(0))) return Fail(rsqrt->result(0), "RMSNorm: x * rsqrt(...)");
    const Node* weighted = SoleUser(scale->result(0));
    const Value* weight = nullptr;
    if (weighted != nullptr && weighted->op() == "aten::mul.Tensor" && weighted->num_operands() == 2) {
      weight = weighted->operand(0) == scale->result(0) ? weighted->operand(1) : weighted->operand(0);
    }
    if (weight == nullptr || Param(weight, 1) == nullptr || Sizes(weight)[0] != Sizes(h).back() ||
        !IsProduct(weighted, scale->result(0), weight)) {
      return Fail(scale->result(0), absl::StrCat("aten::mul.Tensor by a [", Sizes(h).back(), "] parameter (RMSNorm's weight)"));
    }
    return Norm{weighted->result(0), weight, *eps};
  }

  // x (through reshapes to [rows, in]) -> aten::mm(x, aten::t(W)) with W an [out, in]
  // parameter (in: `in_features`, or the model's dim).
  absl::StatusOr<Linear> MatchLinear(const Value* x, int64_t in_features = 0) {
    if (in_features == 0) in_features = match_.model.dim;
    const Value* flat = SkipReshapes(x);
    const Node* mm = SoleUser(flat);
    if (mm == nullptr || mm->op() != "aten::mm" || mm->operand(0) != flat || mm->operand(1)->producer() == nullptr ||
        mm->operand(1)->producer()->op() != "aten::t") {
      return Fail(flat, "aten::mm(x, aten::t(weight)) (a linear layer without bias)");
    }
    const Value* weight = Param(mm->operand(1)->producer()->operand(0), 2);
    if (weight == nullptr || Sizes(weight)[1] != in_features) {
      return Fail(mm->operand(1), absl::StrCat("the transpose of an [out, ", in_features, "] parameter"));
    }
    return Linear{mm->result(0), weight};
  }

  // The slice of `value` along dim 1 [begin, end) -> clone -> reshapes: the end value, or null.
  const Value* SliceColumns(const Value* value, int64_t begin, int64_t end) {
    for (Node* user : value->Users()) {
      if (user->op() != "aten::slice.Tensor" || Number(*user, 1) != 1.0 || Number(*user, 2) != static_cast<double>(begin) ||
          Number(*user, 3) != static_cast<double>(end) || Number(*user, 4).value_or(1) != 1) {
        continue;
      }
      const Node* clone = SoleUser(user->result(0));
      if (clone == nullptr || clone->op() != "aten::clone") return nullptr;
      return SkipReshapes(clone->result(0));
    }
    return nullptr;
  }

  // A [B, 1, heads, head_dim] value transposed to [B, heads, 1, head_dim], or null.
  const Value* Heads(const Value* value, int64_t heads) {
    const std::vector<int64_t>& sizes = Sizes(value);
    const Node* transpose = SoleUser(value);
    if (sizes.size() != 4 || sizes[1] != 1 || sizes[2] != heads || transpose == nullptr ||
        transpose->op() != "aten::transpose.int" || Number(*transpose, 1) != 1.0 || Number(*transpose, 2) != 2.0) {
      return nullptr;
    }
    return transpose->result(0);
  }

  // The row of a rope table at the step's positions: view(index_select(table, 0, index)).
  absl::StatusOr<const Value*> RopeTable(const Value* value, const Value*& table, const Value*& index) {
    const Node* view = value->producer();
    const Node* select = IsReshape(view) ? view->operand(0)->producer() : nullptr;
    if (select == nullptr || select->op() != "aten::index_select" || Number(*select, 1) != 0.0 ||
        !select->operand(0)->is_graph_input() || select->operand(0)->role() != InputRole::kBuffer) {
      return Fail(value, "a rope table's rows: view(aten::index_select(buffer, 0, positions))");
    }
    if (table != nullptr && table != select->operand(0)) return Fail(value, "the same rope table as the other layers");
    if (index != nullptr && index != select->operand(1)) return Fail(value, "the same positions as the other layers");
    table = select->operand(0);
    index = select->operand(1);
    return value;
  }

  // RoPE of x [B, heads, 1, head_dim]: the rotated value.
  absl::StatusOr<const Value*> MatchRope(const Value* x) {
    const int64_t half = match_.model.head_dim / 2;
    const Value *x1 = nullptr, *x2 = nullptr;
    for (Node* user : x->Users()) {
      if (user->op() != "aten::slice.Tensor" || Number(*user, 1) != -1.0 || Number(*user, 4).value_or(1) != 1) continue;
      if (Number(*user, 2) == 0.0 && Number(*user, 3) == static_cast<double>(half)) x1 = user->result(0);
      if (Number(*user, 2) == static_cast<double>(half) && Number(*user, 3) == static_cast<double>(2 * half)) {
        x2 = user->result(0);
      }
    }
    if (x1 == nullptr || x2 == nullptr || x->uses().size() != 2) return Fail(x, "RoPE: the two halves of the last dim");
    const Node* cat = nullptr;
    for (Node* user : x1->Users()) {
      for (Node* next : user->result(0)->Users()) {
        if (next->op() == "aten::sub.Tensor") cat = SoleUser(next->result(0));
      }
    }
    if (cat == nullptr || cat->op() != "aten::cat" || cat->num_operands() != 2 || Number(*cat, 1) != -1.0) {
      return Fail(x1, "RoPE: aten::cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)");
    }
    const Node* sub = cat->operand(0)->producer();
    const Node* add = cat->operand(1)->producer();
    if (sub == nullptr || sub->op() != "aten::sub.Tensor" || add == nullptr || add->op() != "aten::add.Tensor" ||
        Number(*sub, 2).value_or(1) != 1 || Number(*add, 2).value_or(1) != 1) {
      return Fail(cat->result(0), "RoPE: cat(sub, add)");
    }
    // sub = x1 * cos - x2 * sin; add = x2 * cos + x1 * sin (add's operands in either order).
    const Node* x1cos = sub->operand(0)->producer();
    const Node* x2sin = sub->operand(1)->producer();
    if (x1cos == nullptr || x2sin == nullptr) return Fail(sub->result(0), "RoPE: x1 * cos - x2 * sin");
    const Value* cos = x1cos->operand(0) == x1 ? x1cos->operand(1) : x1cos->operand(0);
    const Value* sin = x2sin->operand(0) == x2 ? x2sin->operand(1) : x2sin->operand(0);
    if (!IsProduct(x1cos, x1, cos) || !IsProduct(x2sin, x2, sin)) return Fail(sub->result(0), "RoPE: x1 * cos - x2 * sin");
    const Node* a = add->operand(0)->producer();
    const Node* b = add->operand(1)->producer();
    if (!((IsProduct(a, x2, cos) && IsProduct(b, x1, sin)) || (IsProduct(a, x1, sin) && IsProduct(b, x2, cos)))) {
      return Fail(add->result(0), "RoPE: x2 * cos + x1 * sin");
    }
    if (absl::Status s = RopeTable(cos, match_.rope_cos, rope_index_).status(); !s.ok()) return s;
    if (absl::Status s = RopeTable(sin, match_.rope_sin, rope_index_).status(); !s.ok()) return s;
    if (absl::Status s = PositionsInput(rope_index_).status(); !s.ok()) return s;
    return cat->result(0);
  }

  // index_put(cache, [rows, heads, positions], value, accumulate=false) with `cache` a graph
  // input [B, kv_heads, window, head_dim]: the updated cache.
  absl::StatusOr<const Node*> MatchCacheWrite(const Value* value) {
    const Node* put = UserWithOp(value, "aten::index_put");
    const DecodeModel& m = match_.model;
    if (put == nullptr || put->operand(put->num_operands() - 1) != value ||
        put->args().size() != 4 || put->args()[3].value.kind() != AttrKind::kBool || put->args()[3].value.as_bool()) {
      return Fail(value, "the KV cache's write: aten::index_put(cache, indices, it, false)");
    }
    const Value* cache = put->operand(0);
    const std::vector<int64_t>& sizes = Sizes(cache);
    if (!cache->is_graph_input() || sizes.size() != 4 || sizes[0] != m.batch || sizes[1] != m.n_kv_heads ||
        sizes[3] != m.head_dim || put->ArgOperands(1).size() != 3) {
      return Fail(put->result(0), "a KV cache: a graph input [batch, kv heads, window, head_dim] indexed by 3 tensors");
    }
    if (match_.model.window != 0 && sizes[2] != match_.model.window) return Fail(cache, "every cache of one window");
    if (absl::Status at = PositionsInput(put->ArgOperands(1)[2]).status(); !at.ok()) return at;
    match_.model.window = sizes[2];
    return put;
  }

  // The cache as attention reads it: with grouped-query attention each kv head repeated for
  // its group (unsqueeze(2), expand, clone, view [B, heads, window, head_dim]).
  absl::StatusOr<const Value*> Repeated(const Value* cache) {
    const DecodeModel& m = match_.model;
    if (m.n_kv_heads == m.n_heads) return cache;
    const Node* unsqueeze = SoleUser(cache);
    const Node* expand = unsqueeze == nullptr ? nullptr : SoleUser(unsqueeze->result(0));
    const Node* clone = expand == nullptr ? nullptr : SoleUser(expand->result(0));
    const Node* view = clone == nullptr ? nullptr : SoleUser(clone->result(0));
    if (unsqueeze == nullptr || unsqueeze->op() != "aten::unsqueeze" || Number(*unsqueeze, 1) != 2.0 ||
        expand->op() != "aten::expand" || clone->op() != "aten::clone" || !IsReshape(view) ||
        Sizes(expand->result(0)) != std::vector<int64_t>{m.batch, m.n_kv_heads, m.group_size(), m.window, m.head_dim} ||
        Sizes(view->result(0)) != std::vector<int64_t>{m.batch, m.n_heads, m.window, m.head_dim}) {
      return Fail(cache, "grouped-query attention: each kv head repeated for its group (unsqueeze, expand, clone, view)");
    }
    return view->result(0);
  }

  // The decode mask [B, 1, 1, window], in either form ATen converts the model's boolean mask
  // to: where(position <= the step's position, 0, -inf) (math, flash, efficient attention) or
  // where(!(position <= the step's position), -65504, 0) (cuDNN, which mishandles -inf). The
  // kernel leaves masked positions out; a masked value at or below -65504 (bf16 scores are far
  // above it) makes exp underflow to 0 as -inf does.
  absl::Status MatchMask(const Value* mask) {
    const Node* where = mask->producer();
    if (where == nullptr || where->op() != "aten::where.self" || where->num_operands() != 3) {
      return Fail(mask, "the attention mask: aten::where.self(position <= step position, 0, -inf)");
    }
    auto constant = [](const Value* v) -> std::optional<double> {
      const Node* c = v->producer();
      if (c == nullptr || c->op() != "aten::scalar_tensor") return std::nullopt;
      return Number(*c, 0);
    };
    const Node* condition = where->operand(0)->producer();
    const bool negated = condition != nullptr && condition->op() == "aten::logical_not";
    const Node* le = negated ? condition->operand(0)->producer() : condition;
    const std::optional<double> visible = constant(where->operand(negated ? 2 : 1));
    const std::optional<double> masked = constant(where->operand(negated ? 1 : 2));
    if (!visible.has_value() || *visible != 0.0 || !masked.has_value() || !(*masked <= -65504.0) || le == nullptr ||
        le->op() != "aten::le.Tensor") {
      return Fail(mask,
                  "the attention mask: aten::where.self(aten::le.Tensor(positions, step), 0, -inf) or "
                  "aten::where.self(aten::logical_not(aten::le.Tensor(positions, step)), -65504, 0)");
    }
    const Node* range_view = le->operand(0)->producer();
    const Node* range = IsReshape(range_view) ? range_view->operand(0)->producer() : nullptr;
    if (range == nullptr || range->op() != "aten::arange" || Number(*range, 0) != static_cast<double>(match_.model.window)) {
      return Fail(le->result(0), absl::StrCat("the cache's positions: aten::arange(", match_.model.window, ")"));
    }
    if (absl::Status step = PositionsInput(le->operand(1)).status(); !step.ok()) return step;
    return absl::OkStatus();
  }

  // The one graph input `index` is computed from by reshapes, adds and aranges (the step's
  // positions, i64[batch]), and the same one every time.
  absl::StatusOr<const Value*> PositionsInput(const Value* index) {
    std::vector<const Value*> stack = {index}, inputs;
    absl::flat_hash_set<const Value*> seen;
    while (!stack.empty()) {
      const Value* v = stack.back();
      stack.pop_back();
      if (!seen.insert(v).second) continue;
      if (v->is_graph_input()) {
        inputs.push_back(v);
        continue;
      }
      const Node* p = v->producer();
      if (!IsReshape(p) && p->op() != "aten::add.Tensor" && p->op() != "aten::arange" && p->op() != "aten::expand") {
        return Fail(v, "an index computed from the step's positions by views, adds and aranges");
      }
      for (const Value* operand : p->operands()) stack.push_back(operand);
    }
    const DecodeModel& m = match_.model;
    if (inputs.size() != 1 || Sizes(inputs[0]) != std::vector<int64_t>{m.batch} ||
        inputs[0]->type().tensor().dtype != DType::kInt64) {
      return Fail(index, "an index computed from one graph input of positions, i64[batch]");
    }
    if (match_.positions != nullptr && match_.positions != inputs[0]) {
      return Fail(index, absl::StrCat("the positions %", match_.positions->name(), " as everywhere else"));
    }
    match_.positions = inputs[0];
    return inputs[0];
  }

  absl::StatusOr<const Value*> MatchLayer(const Value* h, const Norm& norm, const Linear& qkv) {
    DecodeModel& m = match_.model;
    DecodeLayerBinding layer;
    layer.attention_norm = norm.weight;
    layer.attention_eps = norm.eps;
    layer.qkv_weight = qkv.weight;
    // The slices give the head counts: q first, then k and v of equal width.
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (Node* user : qkv.out->Users()) {
      if (user->op() != "aten::slice.Tensor" || !Number(*user, 2) || !Number(*user, 3)) {
        return Fail(qkv.out, "q, k and v: three aten::slice.Tensor of the projection");
      }
      ranges.push_back({static_cast<int64_t>(*Number(*user, 2)), static_cast<int64_t>(*Number(*user, 3))});
    }
    std::sort(ranges.begin(), ranges.end());
    const int64_t rows = Sizes(qkv.weight)[0];
    if (ranges.size() != 3 || ranges[0].first != 0 || ranges[0].second != ranges[1].first ||
        ranges[1].second != ranges[2].first || ranges[2].second != rows ||
        ranges[1].second - ranges[1].first != ranges[2].second - ranges[2].first) {
      return Fail(qkv.out, "q, k and v: slices [0, q) [q, q + kv) [q + kv, q + 2 kv) of the projection");
    }
    const Value* q = SliceColumns(qkv.out, ranges[0].first, ranges[0].second);
    const Value* k = SliceColumns(qkv.out, ranges[1].first, ranges[1].second);
    const Value* v = SliceColumns(qkv.out, ranges[2].first, ranges[2].second);
    if (q == nullptr || k == nullptr || v == nullptr || Sizes(q).size() != 4) {
      return Fail(qkv.out, "q, k and v: slice, clone and view to [batch, 1, heads, head_dim]");
    }
    const int64_t head_dim = Sizes(q)[3];
    if (match_.layers.empty()) {
      m.head_dim = head_dim;
      m.n_heads = Sizes(q)[2];
      m.n_kv_heads = Sizes(k).size() == 4 ? Sizes(k)[2] : 0;
    }
    if (head_dim != m.head_dim || Sizes(q)[2] != m.n_heads || ranges[0].second != m.n_heads * m.head_dim ||
        ranges[1].second - ranges[1].first != m.n_kv_heads * m.head_dim) {
      return Fail(q, absl::StrCat("every layer with ", m.n_heads, " query and ", m.n_kv_heads, " kv heads of ", m.head_dim));
    }
    const Value* q_heads = Heads(q, m.n_heads);
    const Value* k_heads = Heads(k, m.n_kv_heads);
    const Value* v_heads = Heads(v, m.n_kv_heads);
    if (q_heads == nullptr || k_heads == nullptr || v_heads == nullptr) {
      return Fail(q, "q, k and v viewed [batch, 1, heads, head_dim] and transposed to [batch, heads, 1, head_dim]");
    }
    absl::StatusOr<const Value*> q_rot = MatchRope(q_heads);
    if (!q_rot.ok()) return q_rot.status();
    absl::StatusOr<const Value*> k_rot = MatchRope(k_heads);
    if (!k_rot.ok()) return k_rot.status();
    absl::StatusOr<const Node*> k_write = MatchCacheWrite(*k_rot);
    if (!k_write.ok()) return k_write.status();
    absl::StatusOr<const Node*> v_write = MatchCacheWrite(v_heads);
    if (!v_write.ok()) return v_write.status();
    layer.key_cache = (*k_write)->operand(0);
    layer.value_cache = (*v_write)->operand(0);
    absl::StatusOr<const Value*> keys = Repeated((*k_write)->result(0));
    if (!keys.ok()) return keys.status();
    absl::StatusOr<const Value*> values = Repeated((*v_write)->result(0));
    if (!values.ok()) return values.status();
    const Node* sdpa = nullptr;
    for (Node* user : (*q_rot)->Users()) {
      if (SdpaOps().contains(user->op())) sdpa = user;
    }
    if (sdpa == nullptr || sdpa->num_operands() < 4 || sdpa->operand(0) != *q_rot || sdpa->operand(1) != *keys ||
        sdpa->operand(2) != *values) {
      return Fail(*q_rot, "attention: SDPA(q, the keys, the values, mask)");
    }
    // No dropout, not causal (the mask says what each position sees), the default scale.
    const auto [dropout_arg, causal_arg] = SdpaArgs(sdpa->op());
    const Attribute* scale = sdpa->FindArg("scale");
    auto arg = [&](int i) -> const Attribute* { return i < static_cast<int>(sdpa->args().size()) ? &sdpa->args()[i].value : nullptr; };
    if (dropout_arg < 0 || (arg(dropout_arg) != nullptr && Number(*sdpa, dropout_arg).value_or(1) != 0.0) ||
        (arg(causal_arg) != nullptr && (arg(causal_arg)->kind() != AttrKind::kBool || arg(causal_arg)->as_bool())) ||
        (scale != nullptr && !scale->is_none())) {
      return Fail(sdpa->result(0), "attention with a mask, without dropout, not causal, with the default scale");
    }
    if (absl::Status mask = MatchMask(sdpa->operand(3)); !mask.ok()) return mask;
    const Node* transpose = SoleUser(sdpa->result(0));
    if (transpose == nullptr || transpose->op() != "aten::transpose.int") {
      return Fail(sdpa->result(0), "attention's output transposed back to [batch, 1, heads, head_dim]");
    }
    absl::StatusOr<Linear> o = MatchLinear(transpose->result(0));
    if (!o.ok()) return o.status();
    layer.o_weight = o->weight;
    absl::StatusOr<const Value*> h1 = MatchResidual(h, o->out);
    if (!h1.ok()) return h1.status();
    absl::StatusOr<Norm> ffn_norm = MatchRmsNorm(*h1);
    if (!ffn_norm.ok()) return ffn_norm.status();
    layer.ffn_norm = ffn_norm->weight;
    layer.ffn_eps = ffn_norm->eps;
    absl::StatusOr<Linear> gate_up = MatchLinear(ffn_norm->out);
    if (!gate_up.ok()) return gate_up.status();
    layer.gate_up_weight = gate_up->weight;
    const int64_t ffn = Sizes(gate_up->weight)[0] / 2;
    if (match_.layers.empty()) m.ffn_hidden = ffn;
    const Value* gate = SliceColumns(gate_up->out, 0, ffn);
    const Value* up = SliceColumns(gate_up->out, ffn, 2 * ffn);
    if (ffn != m.ffn_hidden || gate == nullptr || up == nullptr || gate_up->out->uses().size() != 2) {
      return Fail(gate_up->out, absl::StrCat("gate and up: slices [0, ", m.ffn_hidden, ") and [", m.ffn_hidden, ", ",
                                             2 * m.ffn_hidden, ") of the projection"));
    }
    const Node* silu = SoleUser(gate);
    const Node* product = silu == nullptr || silu->op() != "aten::silu" ? nullptr : SoleUser(silu->result(0));
    if (!IsProduct(product, silu == nullptr ? nullptr : silu->result(0), up)) {
      return Fail(gate, "SwiGLU: aten::silu(gate) * up");
    }
    absl::StatusOr<Linear> down = MatchLinear(product->result(0), m.ffn_hidden);
    if (!down.ok()) return down.status();
    if (Sizes(down->weight) != std::vector<int64_t>{m.dim, m.ffn_hidden}) {
      return Fail(down->out, absl::StrCat("the down projection's weight [", m.dim, ", ", m.ffn_hidden, "]"));
    }
    layer.down_weight = down->weight;
    absl::StatusOr<const Value*> h2 = MatchResidual(*h1, down->out);
    if (!h2.ok()) return h2.status();
    match_.layers.push_back(layer);
    return *h2;
  }

  // h + reshape(branch) [B, 1, dim]: the new hidden state.
  absl::StatusOr<const Value*> MatchResidual(const Value* h, const Value* branch) {
    const Value* shaped = SkipReshapes(branch);
    const Node* add = SoleUser(shaped);
    if (add == nullptr || add->op() != "aten::add.Tensor" || add->operand(0) != h || add->operand(1) != shaped ||
        Number(*add, 2).value_or(1) != 1 || Sizes(shaped) != Sizes(h)) {
      return Fail(shaped, "the residual: aten::add.Tensor(hidden, it)");
    }
    return add->result(0);
  }

  // The final norm, the LM head (logits, an output) and argmax (the next token, an output).
  absl::Status MatchHead(const Norm& norm, const Linear& head) {
    DecodeModel& m = match_.model;
    match_.final_norm = norm.weight;
    match_.final_eps = norm.eps;
    match_.lm_head = head.weight;
    if (Sizes(head.weight)[0] != m.vocab) {
      return Fail(head.out, absl::StrCat("the LM head: [", m.vocab, ", ", m.dim, "] (the vocabulary of the embedding)"));
    }
    const Node* view = SoleUser(head.out);
    const Value* logits = IsReshape(view) ? view->result(0) : nullptr;
    const Node* select = logits == nullptr ? nullptr : UserWithOp(logits, "aten::select.int");
    const Node* argmax = select == nullptr ? nullptr : SoleUser(select->result(0));
    if (argmax == nullptr || argmax->op() != "aten::argmax") {
      return Fail(head.out, "the logits viewed [batch, 1, vocab], their greedy choice by aten::argmax (sampling graphs "
                            "are not claimed)");
    }
    bool logits_out = false, token_out = false;
    for (const GraphOutput& output : graph_.outputs()) {
      logits_out |= output.value == logits;
      token_out |= output.value == argmax->result(0);
    }
    if (!logits_out || !token_out) return Fail(logits, "the logits and the next token as graph outputs");
    match_.logits = logits;
    match_.next_token = argmax->result(0);
    // The positions were found by the layers' RoPE (none without a layer: Run refuses that).
    return absl::OkStatus();
  }

  const Graph& graph_;
  DecodeGraphMatch match_;
  const Value* rope_index_ = nullptr;
};

}  // namespace

absl::StatusOr<DecodeGraphMatch> MatchDecodeGraph(const Graph& graph) { return Matcher(graph).Run(); }

}  // namespace magi::megakernel
