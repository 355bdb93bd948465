#include "magi/models/llama.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "magi/compat/attention.h"

namespace magi::models {

LlamaConfig LlamaConfig::Tiny() { return LlamaConfig(); }

LlamaConfig LlamaConfig::Small() {
  LlamaConfig c;
  c.vocab_size = 256;
  c.dim = 256;
  c.n_layers = 4;
  c.n_heads = 8;
  c.ffn_hidden = 688;
  c.max_seq_len = 128;
  return c;
}

LlamaConfig LlamaConfig::Llama1B() {
  LlamaConfig c;
  c.vocab_size = 32000;
  c.dim = 2048;
  c.n_layers = 16;
  c.n_heads = 16;
  c.ffn_hidden = 5632;
  c.max_seq_len = 2048;
  return c;
}

LlamaConfig LlamaConfig::Llama3_8B() {
  LlamaConfig c;
  c.vocab_size = 128256;
  c.dim = 4096;
  c.n_layers = 32;
  c.n_heads = 32;
  c.ffn_hidden = 14336;
  c.max_seq_len = 8192;
  c.rope_theta = 500000.0;
  return c;
}

int64_t LlamaConfig::NumParameters() const {
  // wq and wo are dim x dim; wk and wv dim x (kv_heads * head_dim), dim x dim without GQA.
  int64_t per_layer = 2 * dim * dim + 2 * dim * (kv_heads() * head_dim()) + 3 * dim * ffn_hidden + 2 * dim;
  return vocab_size * dim * (tie_embeddings ? 1 : 2) + n_layers * per_layer + dim;
}

std::string LlamaConfig::ToString() const {
  return absl::StrCat("llama(vocab=", vocab_size, ", dim=", dim, ", layers=", n_layers, ", heads=", n_heads,
                      kv_heads() != n_heads ? absl::StrCat(", kv_heads=", kv_heads()) : "", ", ffn=", ffn_hidden,
                      ", seq=", max_seq_len, tie_embeddings ? ", tied" : "", ")");
}

absl::Status LlamaConfig::Validate() const {
  const std::pair<const char*, int64_t> sizes[] = {{"vocab_size", vocab_size},
                                                   {"dim", dim},
                                                   {"n_heads", n_heads},
                                                   {"ffn_hidden", ffn_hidden},
                                                   {"max_seq_len", max_seq_len}};
  for (const auto& [name, value] : sizes) {
    if (value <= 0) {
      return absl::InvalidArgumentError(absl::StrFormat("llama config: %s must be positive, got %d", name, value));
    }
  }
  if (n_layers < 0) {
    return absl::InvalidArgumentError(absl::StrFormat("llama config: n_layers must not be negative, got %d", n_layers));
  }
  if (dim % n_heads != 0 || head_dim() % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "llama config: dim %d must split into n_heads %d heads of even size (RoPE rotates pairs)", dim, n_heads));
  }
  if (n_kv_heads < 0 || n_kv_heads > n_heads || n_heads % kv_heads() != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "llama config: n_kv_heads %d must divide n_heads %d (0 means n_heads): each key/value head serves "
        "an equal group of query heads",
        n_kv_heads, n_heads));
  }
  return absl::OkStatus();
}

namespace {

// cos and sin of every position's rotary angles, [max_seq_len, head_dim / 2], fp32 on the CPU.
std::pair<at::Tensor, at::Tensor> RopeTables(const LlamaConfig& c) {
  torch::NoGradGuard no_grad;
  int64_t half = c.head_dim() / 2;
  at::Tensor inv_freq = 1.0 / torch::pow(c.rope_theta, torch::arange(0, half, torch::kFloat32) * (2.0 / c.head_dim()));
  at::Tensor angles = torch::outer(torch::arange(c.max_seq_len, torch::kFloat32), inv_freq);
  return {angles.cos(), angles.sin()};
}

// Rotates pairs (x1, x2) = (first half, second half) of the last dim by the position's angle.
at::Tensor ApplyRotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  int64_t half = x.size(-1) / 2;
  at::Tensor x1 = x.narrow(-1, 0, half);
  at::Tensor x2 = x.narrow(-1, half, half);
  return torch::cat({x1 * cos - x2 * sin, x1 * sin + x2 * cos}, -1);
}

// Grouped-query attention: kv [batch, kv_heads, T, head_dim] -> [batch, n_heads, T, head_dim],
// each kv head repeated for the n_heads / kv_heads query heads that read it (as
// torch.repeat_interleave(repeats, dim=1)). Written as unsqueeze + expand (views) and
// reshape (one copy), ops that capture, shape inference and every backend handle;
// aten::repeat_interleave lowers to its Tensor-repeats form, whose output size is
// data-dependent. Adds no op at all when kv_heads == n_heads (multi-head attention).
at::Tensor RepeatKvHeads(const at::Tensor& kv, int64_t n_heads) {
  const int64_t batch = kv.size(0), kv_heads = kv.size(1), seq = kv.size(2), head_dim = kv.size(3);
  if (kv_heads == n_heads) return kv;
  return kv.unsqueeze(2)
      .expand({batch, kv_heads, n_heads / kv_heads, seq, head_dim})
      .reshape({batch, n_heads, seq, head_dim});
}

}  // namespace

AttentionImpl::AttentionImpl(const LlamaConfig& c, const torch::TensorOptions& options)
    : n_heads(c.n_heads), kv_heads(c.kv_heads()), head_dim(c.head_dim()) {
  wq = register_module("wq", Linear(c.dim, c.dim, false, options));
  wk = register_module("wk", Linear(c.dim, kv_heads * head_dim, false, options));
  wv = register_module("wv", Linear(c.dim, kv_heads * head_dim, false, options));
  wo = register_module("wo", Linear(c.dim, c.dim, false, options));
}

at::Tensor AttentionImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  int64_t batch = x.size(0), seq = x.size(1);
  // Heads stay laid out [batch, seq, heads, head_dim], the projections' own layout: RoPE
  // writes its result so and attention reads it transposed (a view). Fused attention
  // kernels (cuDNN, flash) lay their output out like q, so merging the heads back is a
  // view too, not a copy of the activations in the forward and of their gradient in the
  // backward. The math is the same op for op.
  auto split = [&](const at::Tensor& t, int64_t heads) { return t.view({batch, seq, heads, head_dim}); };
  at::Tensor q = split(CallScoped("wq", wq, x), n_heads);
  at::Tensor k = split(CallScoped("wk", wk, x), kv_heads);
  at::Tensor v = split(CallScoped("wv", wv, x), kv_heads).transpose(1, 2);
  {
    ScopedModulePath scope("rope");
    const at::Tensor cos_heads = cos.unsqueeze(1);  // [seq, 1, head_dim / 2] against [batch, seq, heads, ...]
    const at::Tensor sin_heads = sin.unsqueeze(1);
    q = ApplyRotary(q, cos_heads, sin_heads).transpose(1, 2);
    k = ApplyRotary(k, cos_heads, sin_heads).transpose(1, 2);
  }
  at::Tensor attended;
  {
    ScopedModulePath scope("sdpa");
    attended = compat::CausalAttention(q, RepeatKvHeads(k, n_heads), RepeatKvHeads(v, n_heads));
  }
  at::Tensor merged = attended.transpose(1, 2).reshape({batch, seq, n_heads * head_dim});
  return CallScoped("wo", wo, merged);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> AttentionImpl::ForwardWithCache(const at::Tensor& x,
                                                                                const CacheStep& step,
                                                                                const at::Tensor& keys,
                                                                                const at::Tensor& values) {
  int64_t batch = x.size(0), seq = x.size(1);
  auto heads = [&](const at::Tensor& t, int64_t count) {
    return t.view({batch, seq, count, head_dim}).transpose(1, 2);
  };
  at::Tensor q = heads(CallScoped("wq", wq, x), n_heads);
  at::Tensor k = heads(CallScoped("wk", wk, x), kv_heads);
  at::Tensor v = heads(CallScoped("wv", wv, x), kv_heads);
  {
    ScopedModulePath scope("rope");
    q = ApplyRotary(q, step.cos, step.sin);
    k = ApplyRotary(k, step.cos, step.sin);
  }
  at::Tensor new_keys, new_values, attended;
  {
    ScopedModulePath scope("kv_cache");
    if (step.whole_window) {
      new_keys = k.contiguous();
      new_values = v.contiguous();
    } else if (step.write_index.defined()) {
      new_keys = keys.scatter(2, step.write_index, k);
      new_values = values.scatter(2, step.write_index, v);
    } else {
      const c10::List<c10::optional<at::Tensor>> at_token({step.write_rows, step.write_heads, step.write_positions});
      new_keys = keys.index_put(at_token, k);
      new_values = values.index_put(at_token, v);
    }
  }
  {
    ScopedModulePath scope("sdpa");
    // The cache keeps the kv heads; attention reads them repeated per query head.
    attended =
        compat::MaskedAttention(q, RepeatKvHeads(new_keys, n_heads), RepeatKvHeads(new_values, n_heads), step.visible);
  }
  at::Tensor merged = attended.transpose(1, 2).reshape({batch, seq, n_heads * head_dim});
  return {CallScoped("wo", wo, merged), new_keys, new_values};
}

FeedForwardImpl::FeedForwardImpl(const LlamaConfig& c, const torch::TensorOptions& options) {
  w1 = register_module("w1", Linear(c.dim, c.ffn_hidden, false, options));
  w2 = register_module("w2", Linear(c.ffn_hidden, c.dim, false, options));
  w3 = register_module("w3", Linear(c.dim, c.ffn_hidden, false, options));
}

at::Tensor FeedForwardImpl::forward(const at::Tensor& x) {
  at::Tensor gate = torch::silu(CallScoped("w1", w1, x));
  return CallScoped("w2", w2, gate * CallScoped("w3", w3, x));
}

DecoderBlockImpl::DecoderBlockImpl(const LlamaConfig& c, const torch::TensorOptions& options) {
  attention_norm = register_module("attention_norm", RMSNorm(c.dim, c.norm_eps, options));
  attention = register_module("attention", Attention(c, options));
  ffn_norm = register_module("ffn_norm", RMSNorm(c.dim, c.norm_eps, options));
  feed_forward = register_module("feed_forward", FeedForward(c, options));
}

at::Tensor DecoderBlockImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  at::Tensor h = x + CallScoped("attention", attention, CallScoped("attention_norm", attention_norm, x), cos, sin);
  return h + CallScoped("feed_forward", feed_forward, CallScoped("ffn_norm", ffn_norm, h));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> DecoderBlockImpl::ForwardWithCache(const at::Tensor& x,
                                                                                   const CacheStep& step,
                                                                                   const at::Tensor& keys,
                                                                                   const at::Tensor& values) {
  at::Tensor normed = CallScoped("attention_norm", attention_norm, x);
  at::Tensor attended, new_keys, new_values;
  {
    ScopedModulePath scope("attention");
    std::tie(attended, new_keys, new_values) = attention->ForwardWithCache(normed, step, keys, values);
  }
  at::Tensor h = x + attended;
  return {h + CallScoped("feed_forward", feed_forward, CallScoped("ffn_norm", ffn_norm, h)), new_keys, new_values};
}

KvCache KvCache::Zeros(const LlamaConfig& config, int64_t batch, int64_t cache_len,
                       const torch::TensorOptions& options) {
  KvCache cache;
  for (int64_t i = 0; i < config.n_layers; ++i) {
    cache.keys.push_back(torch::zeros({batch, config.kv_heads(), cache_len, config.head_dim()}, options));
    cache.values.push_back(torch::zeros({batch, config.kv_heads(), cache_len, config.head_dim()}, options));
  }
  return cache;
}

std::vector<at::Tensor> KvCache::Flat() const {
  std::vector<at::Tensor> flat;
  for (size_t i = 0; i < keys.size(); ++i) {
    flat.push_back(keys[i]);
    flat.push_back(values[i]);
  }
  return flat;
}

KvCache KvCache::FromFlat(const std::vector<at::Tensor>& tensors, size_t first) {
  KvCache cache;
  for (size_t i = first; i + 1 < tensors.size(); i += 2) {
    cache.keys.push_back(tensors[i]);
    cache.values.push_back(tensors[i + 1]);
  }
  return cache;
}

LlamaImpl::LlamaImpl(const LlamaConfig& c, const torch::TensorOptions& options) : config(c) {
  // A constructor cannot return a Status: the module's own convention (LibTorch's) is c10::Error.
  const absl::Status valid = c.Validate();
  TORCH_CHECK(valid.ok(), std::string(valid.message()));
  tok_embeddings = register_module("tok_embeddings", Embedding(c.vocab_size, c.dim, options));
  auto list = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.n_layers; ++i) {
    layers.push_back(DecoderBlock(c, options));
    list->push_back(layers.back());
  }
  norm = register_module("norm", RMSNorm(c.dim, c.norm_eps, options));
  if (!c.tie_embeddings) output = register_module("output", Linear(c.dim, c.vocab_size, false, options));

  // Rotary tables, computed in fp32 on the CPU (or left empty on meta).
  torch::TensorOptions fp32 = options.dtype(torch::kFloat32);
  int64_t half = c.head_dim() / 2;
  if (options.device().is_meta()) {
    rope_cos = torch::empty({c.max_seq_len, half}, fp32);
    rope_sin = torch::empty({c.max_seq_len, half}, fp32);
  } else {
    auto [cos, sin] = RopeTables(c);
    rope_cos = cos.to(options.device());
    rope_sin = sin.to(options.device());
  }
  rope_cos = register_buffer("rope_cos", rope_cos.to(options.dtype()));
  rope_sin = register_buffer("rope_sin", rope_sin.to(options.dtype()));
}

void LlamaImpl::ResetParameter(const std::string& name, at::Tensor& tensor) {
  if (name != "rope_cos" && name != "rope_sin") return;
  torch::NoGradGuard no_grad;
  auto [cos, sin] = RopeTables(config);
  tensor.copy_(name == "rope_cos" ? cos : sin);
}

at::Tensor LlamaImpl::forward(const at::Tensor& tokens) {
  int64_t seq = tokens.size(1);
  at::Tensor h = CallScoped("tok_embeddings", tok_embeddings, tokens);
  at::Tensor cos = rope_cos.narrow(0, 0, seq);
  at::Tensor sin = rope_sin.narrow(0, 0, seq);
  for (size_t i = 0; i < layers.size(); ++i) {
    h = CallScoped(absl::StrCat("layers.", i), layers[i], h, cos, sin);
  }
  h = CallScoped("norm", norm, h);
  if (config.tie_embeddings) {
    ScopedModulePath scope("output");
    return torch::linear(h, tok_embeddings->weight);
  }
  return CallScoped("output", output, h);
}

LlamaImpl::CachedOutput LlamaImpl::ForwardWithCache(const at::Tensor& tokens, const at::Tensor& positions,
                                                     const KvCache& cache, CacheWrite write, CacheWriteOp op) {
  const int64_t batch = tokens.size(0), seq = tokens.size(1);
  const int64_t cache_len = cache.cache_len();
  const int64_t half = config.head_dim() / 2;
  CacheStep step;
  step.whole_window = write == CacheWrite::kWholeWindow;
  TORCH_CHECK(!step.whole_window || seq == cache_len, "a whole-window cache write needs ", cache_len,
              " tokens per sequence (the cache's length), got ", seq);
  // Each new token's position, [batch, seq]; the mask and the cache writes follow from it.
  at::Tensor where = write != CacheWrite::kAtPositions
                         ? torch::arange(seq, positions.options()).view({1, seq}).expand({batch, seq})
                         : positions.view({batch, 1}) + torch::arange(seq, positions.options()).view({1, seq});
  at::Tensor flat = where.reshape({-1});
  step.cos = rope_cos.index_select(0, flat).view({batch, 1, seq, half});
  step.sin = rope_sin.index_select(0, flat).view({batch, 1, seq, half});
  step.visible = torch::arange(cache_len, positions.options()).view({1, 1, 1, cache_len}) <=
                 where.view({batch, 1, seq, 1});
  if (!step.whole_window && op == CacheWriteOp::kScatter) {
    step.write_index = where.view({batch, 1, seq, 1}).expand({batch, config.kv_heads(), seq, config.head_dim()});
  } else if (!step.whole_window) {
    step.write_rows = torch::arange(batch, positions.options()).view({batch, 1, 1});
    step.write_heads = torch::arange(config.kv_heads(), positions.options()).view({1, config.kv_heads(), 1});
    step.write_positions = where.view({batch, 1, seq});
  }

  CachedOutput out;
  at::Tensor h = CallScoped("tok_embeddings", tok_embeddings, tokens);
  for (size_t i = 0; i < layers.size(); ++i) {
    ScopedModulePath scope(absl::StrCat("layers.", i));
    at::Tensor keys, values;
    std::tie(h, keys, values) = layers[i]->ForwardWithCache(h, step, cache.keys.at(i), cache.values.at(i));
    out.cache.keys.push_back(keys);
    out.cache.values.push_back(values);
  }
  h = CallScoped("norm", norm, h);
  if (config.tie_embeddings) {
    ScopedModulePath scope("output");
    out.logits = torch::linear(h, tok_embeddings->weight);
  } else {
    out.logits = CallScoped("output", output, h);
  }
  return out;
}

at::Tensor LanguageModelLoss(const at::Tensor& logits, const at::Tensor& targets) {
  ScopedModulePath scope("loss");
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

}  // namespace magi::models
