// A Llama-style decoder-only transformer in LibTorch C++: token embedding, RMSNorm,
// rotary position embedding, causal multi-head attention (scaled_dot_product_attention
// on LibTorch 2.x, matmul + softmax on 1.13), SwiGLU MLP, LM head (tied or not).
// Sizes range from Tiny (tests) to Llama3_8B (capture on meta).
//
//   models::Llama model(models::LlamaConfig::Tiny(), torch::TensorOptions().device(torch::kMeta));
//   at::Tensor logits = model->forward(tokens);   // tokens [batch, seq] int64
//   at::Tensor loss = models::LanguageModelLoss(logits, targets);
#ifndef MAGI_MODELS_LLAMA_H_
#define MAGI_MODELS_LLAMA_H_

#include <string>

#include "magi/models/layers.h"

namespace magi::models {

struct LlamaConfig {
  int64_t vocab_size = 256;
  int64_t dim = 64;
  int64_t n_layers = 2;
  int64_t n_heads = 4;
  int64_t ffn_hidden = 176;
  int64_t max_seq_len = 64;
  bool tie_embeddings = false;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;

  int64_t head_dim() const { return dim / n_heads; }
  int64_t NumParameters() const;
  std::string ToString() const;

  static LlamaConfig Tiny();       // 2 layers, dim 64: unit tests
  static LlamaConfig Small();      // 4 layers, dim 256: the CPU training example
  static LlamaConfig Llama1B();    // 16 layers, dim 2048, 16 heads, ffn 5632, vocab 32000 (953M): the GPU benchmark
  static LlamaConfig Llama3_8B();  // 32 layers, dim 4096, ffn 14336, vocab 128256 (without GQA)
};

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const LlamaConfig& config, const torch::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
  int64_t n_heads;
  int64_t head_dim;
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
  RMSNorm attention_norm{nullptr}, ffn_norm{nullptr};
  Attention attention{nullptr};
  FeedForward feed_forward{nullptr};
};
TORCH_MODULE(DecoderBlock);

class LlamaImpl : public torch::nn::Module, public ResetsParameters {
 public:
  LlamaImpl(const LlamaConfig& config, const torch::TensorOptions& options = {});
  // tokens [batch, seq] (int64) -> logits [batch, seq, vocab].
  at::Tensor forward(const at::Tensor& tokens);
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
