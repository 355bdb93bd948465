// A Llama-style decoder-only transformer in LibTorch C++: token embedding, RMSNorm,
// rotary position embedding, causal multi-head attention (scaled_dot_product_attention
// on LibTorch 2.x, matmul + softmax on 1.13) with optional grouped-query attention
// (n_kv_heads < n_heads: each key/value head serves n_heads / n_kv_heads query heads),
// SwiGLU MLP, LM head (tied or not).
// Sizes range from Tiny (tests) to Llama3_8B (capture on meta).
//
//   models::Llama model(models::LlamaConfig::Tiny(), torch::TensorOptions().device(torch::kMeta));
//   at::Tensor logits = model->forward(tokens);   // tokens [batch, seq] int64
//   at::Tensor loss = models::LanguageModelLoss(logits, targets);
//
// Incremental decoding with a KV cache (examples:generate): ForwardWithCache runs new
// tokens at given positions against every layer's cached keys and values, with static
// shapes (the cache has a fixed length; positions are a tensor, the mask is built from
// them), and returns the cache with the new positions written:
//
//   models::KvCache cache = models::KvCache::Zeros(config, batch, window, options);
//   auto prefill = model->ForwardWithCache(prompt_window, zeros, cache);     // [B, window] at 0..window-1
//   auto step = model->ForwardWithCache(next_tokens, positions, prefill.cache);  // [B, 1] at positions [B]
//
// forward() is untouched by it (training and its tests keep their results).
#ifndef MAGI_MODELS_LLAMA_H_
#define MAGI_MODELS_LLAMA_H_

#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "magi/models/layers.h"

namespace magi::models {

struct LlamaConfig {
  int64_t vocab_size = 256;
  int64_t dim = 64;
  int64_t n_layers = 2;
  int64_t n_heads = 4;
  // Key/value heads (grouped-query attention); 0 means n_heads (multi-head attention).
  // n_heads must be a multiple of it: query head h reads kv head h / (n_heads / kv_heads()).
  int64_t n_kv_heads = 0;
  int64_t ffn_hidden = 176;
  int64_t max_seq_len = 64;
  bool tie_embeddings = false;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;

  int64_t head_dim() const { return dim / n_heads; }
  int64_t kv_heads() const { return n_kv_heads == 0 ? n_heads : n_kv_heads; }
  int64_t NumParameters() const;
  std::string ToString() const;  // names the kv heads only when they differ from n_heads
  // InvalidArgument naming the field when the sizes cannot build a model: dim not split
  // into n_heads heads of even size (RoPE rotates pairs), n_kv_heads negative, above
  // n_heads or not dividing it, a non-positive size. LlamaImpl's constructor checks it.
  absl::Status Validate() const;

  static LlamaConfig Tiny();       // 2 layers, dim 64: unit tests
  static LlamaConfig Small();      // 4 layers, dim 256: the CPU training example
  static LlamaConfig Llama1B();    // 16 layers, dim 2048, 16 heads, ffn 5632, vocab 32000 (953M): the GPU benchmark
  // 32 layers, dim 4096, 32 heads, ffn 14336, vocab 128256. Without GQA (n_kv_heads 0):
  // Meta's checkpoint has 8 kv heads, but the benchmarks and plans measured on this preset
  // keep its multi-head shape; set n_kv_heads = 8 for the checkpoint's.
  static LlamaConfig Llama3_8B();
};

// Every layer's keys and values of a batch: keys[l], values[l] are
// [batch, kv_heads, cache_len, head_dim] (config.kv_heads(): with grouped-query attention
// the cache holds each kv head once, not repeated per query head), in the model's dtype
// and device.
struct KvCache {
  std::vector<at::Tensor> keys;
  std::vector<at::Tensor> values;

  // Zeros for `batch` sequences of `cache_len` positions (<= config.max_seq_len).
  static KvCache Zeros(const LlamaConfig& config, int64_t batch, int64_t cache_len,
                       const torch::TensorOptions& options);
  int64_t cache_len() const { return keys.empty() ? 0 : keys[0].size(2); }
  // keys[0], values[0], keys[1], ... (the order ForwardWithCache's graphs take them in).
  std::vector<at::Tensor> Flat() const;
  static KvCache FromFlat(const std::vector<at::Tensor>& tensors, size_t first = 0);
};

// What the attention of one new block of tokens needs besides its input (built once per
// forward by LlamaImpl::ForwardWithCache, shared by the layers).
struct CacheStep {
  at::Tensor cos, sin;      // [batch, 1, T, head_dim / 2]: the rotary angles of each token's position
  at::Tensor visible;       // bool [batch, 1, T, cache_len]: key j is visible to a token at p iff j <= p
  // CacheWriteOp::kIndexPut: the cache element [b, h, p] of each token's keys and values,
  // as index_put's three broadcast indices: rows [batch, 1, 1], kv heads [1, kv_heads, 1]
  // and positions [batch, 1, T].
  at::Tensor write_rows, write_heads, write_positions;
  // CacheWriteOp::kScatter: int64 [batch, kv_heads, T, head_dim], each token's position
  // (scatter on dim 2).
  at::Tensor write_index;
  // The block is the whole window from position 0 (CacheWrite::kWholeWindow): its keys and
  // values ARE the new cache, no write (no index set).
  bool whole_window = false;
};

// How LlamaImpl::ForwardWithCache writes the new positions into the cache.
enum class CacheWrite {
  kAtPositions,  // scatter at positions[b] + 0 .. T-1 (decode steps, any block)
  // A prefill: the block sits at positions 0 .. T-1 whatever `positions` holds (not read),
  // scattered there (in place over a donated cache). Its index does not depend on an input,
  // so a graph run on synthesized inputs (calibration) cannot write out of bounds.
  kFromStart,
  // The block fills the whole cache from position 0 (a prefill: T == cache length,
  // `positions` not read): the new cache is the block's keys and values, the bits a
  // scatter would write, without one (ATen's deterministic CUDA scatter sorts its index:
  // docs/deterministic.md).
  kWholeWindow,
};

// Which ATen op writes the new positions into the cache (the same bits either way).
enum class CacheWriteOp {
  // aten::index_put at (row, kv head, position): Inductor fuses it into the kernel that
  // makes the keys and values, and a partition writes a donated cache in place with it
  // (docs/examples.md, "Donation"); the primary backend runs it as index_put_ over a donated cache.
  kIndexPut,
  // aten::scatter along the position dim. Deterministic generation uses it: its index has
  // one entry along that dim, which shows that the plain CUDA kernel writes every target
  // once (the runtime then skips ATen's sort-based deterministic path); index_put's
  // deterministic CUDA path sorts its indices and nothing here shows them unique.
  kScatter,
};

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const LlamaConfig& config, const torch::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
  // x [batch, T, dim] of new tokens; writes their rotated keys and values into copies of
  // the layer's cache at their positions (index_put or scatter, functional) and attends over
  // the whole cache under `step.visible` (with step.whole_window the block's keys and
  // values are the new cache). Returns {output, keys', values'}, the cache's kv heads
  // (not repeated per query head).
  std::tuple<at::Tensor, at::Tensor, at::Tensor> ForwardWithCache(const at::Tensor& x, const CacheStep& step,
                                                                  const at::Tensor& keys, const at::Tensor& values);
  int64_t n_heads;
  int64_t kv_heads;  // n_heads, or fewer with grouped-query attention
  int64_t head_dim;
  // wq: dim -> n_heads * head_dim; wk, wv: dim -> kv_heads * head_dim; wo: back to dim.
  Linear wq{nullptr}, wk{nullptr}, wv{nullptr}, wo{nullptr};
};
TORCH_MODULE(Attention);

class FeedForwardImpl : public torch::nn::Module {
 public:
  FeedForwardImpl(const LlamaConfig& config, const torch::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x);  // w2(silu(w1 x) * w3 x)
  Linear w1{nullptr}, w2{nullptr}, w3{nullptr};
};
TORCH_MODULE(FeedForward);

class DecoderBlockImpl : public torch::nn::Module {
 public:
  DecoderBlockImpl(const LlamaConfig& config, const torch::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
  // The block over new tokens with the layer's cache (AttentionImpl::ForwardWithCache).
  std::tuple<at::Tensor, at::Tensor, at::Tensor> ForwardWithCache(const at::Tensor& x, const CacheStep& step,
                                                                  const at::Tensor& keys, const at::Tensor& values);
  RMSNorm attention_norm{nullptr}, ffn_norm{nullptr};
  Attention attention{nullptr};
  FeedForward feed_forward{nullptr};
};
TORCH_MODULE(DecoderBlock);

class LlamaImpl : public torch::nn::Module, public ResetsParameters {
 public:
  // c10::Error with config.Validate()'s message when the config is invalid.
  LlamaImpl(const LlamaConfig& config, const torch::TensorOptions& options = {});
  // tokens [batch, seq] (int64) -> logits [batch, seq, vocab].
  at::Tensor forward(const at::Tensor& tokens);

  struct CachedOutput {
    at::Tensor logits;  // [batch, T, vocab]
    KvCache cache;      // the input cache with the T new positions written
  };
  // tokens [batch, T] (int64) at positions positions[b] + 0 .. T-1 (positions: int64
  // [batch]); each token attends to the cache positions up to its own: the cache must
  // hold the keys and values of every earlier position of the sequence, and positions
  // after it are ignored (whatever they hold). With positions 0 and T == cache_len it is
  // forward() on the same tokens, plus the cache (a prefill); T == 1 is one decode step.
  // The caller keeps positions[b] + T <= cache.cache_len() <= config.max_seq_len: ATen's
  // scatter fails on the CPU and asserts on CUDA otherwise. Functional: `cache` is not
  // written (a compiled graph that is given the cache as donated inputs writes in place).
  // CacheWrite::kWholeWindow (T == cache_len, else c10::Error): a prefill from position 0.
  // `op` picks the op that writes the positions (CacheWriteOp; not read with kWholeWindow).
  CachedOutput ForwardWithCache(const at::Tensor& tokens, const at::Tensor& positions, const KvCache& cache,
                                CacheWrite write = CacheWrite::kAtPositions,
                                CacheWriteOp op = CacheWriteOp::kIndexPut);
  // Its own tensors are the rotary tables (rope_cos, rope_sin).
  void ResetParameter(const std::string& name, at::Tensor& tensor) override;

  LlamaConfig config;
  Embedding tok_embeddings{nullptr};
  std::vector<DecoderBlock> layers;
  RMSNorm norm{nullptr};
  Linear output{nullptr};  // null when tie_embeddings
  at::Tensor rope_cos;     // [max_seq_len, head_dim / 2] buffers
  at::Tensor rope_sin;
};
TORCH_MODULE(Llama);

// Mean next-token cross entropy of logits [batch, seq, vocab] against targets [batch, seq].
at::Tensor LanguageModelLoss(const at::Tensor& logits, const at::Tensor& targets);

}  // namespace magi::models

#endif  // MAGI_MODELS_LLAMA_H_
