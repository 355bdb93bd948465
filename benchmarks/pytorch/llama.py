"""The PyTorch twin of Magi's C++ Llama (magi/models/llama.{h,cc}, layers.{h,cc}), for the FSDP2 benchmark.

Same parameter names, shapes and registration order as the C++ module's named_parameters()
(tok_embeddings.weight, layers.<i>.attention_norm.weight, layers.<i>.attention.w{q,k,v,o}.weight,
layers.<i>.ffn_norm.weight, layers.<i>.feed_forward.w{1,2,3}.weight, norm.weight, output.weight), and the
same math, op for op:
  - RMSNorm: x * rsqrt(mean(x^2, -1) + eps) * weight, computed in x's dtype (no upcast);
  - RoPE: rotate-half convention (pairs are (x[i], x[i + head_dim/2])), tables cos/sin [max_seq_len,
    head_dim/2] computed in fp32 on the CPU as 1 / theta^(arange(head_dim/2) * 2/head_dim), buffers
    `rope_cos` / `rope_sin`; used in the dtype of the activations (the C++ model is built in its compute
    dtype, so its tables are rounded to it; here they are rounded in forward, to the same values);
  - attention: scaled_dot_product_attention(q, k, v, is_causal=True) on PyTorch 2.x, matmul + masked
    softmax on 1.13, exactly as magi/compat/attention.h; with grouped-query attention (n_kv_heads <
    n_heads) wk/wv have n_kv_heads * head_dim outputs and each key/value head is repeated for its
    n_heads / n_kv_heads query heads (repeat_interleave on the head dim, as RepeatKvHeads in C++);
  - SwiGLU: w2(silu(w1 x) * w3 x); blocks h = x + attn(norm(x)); out = h + ffn(norm(h));
  - LM head: output.weight, or tok_embeddings.weight when tied;
  - language_model_loss: mean cross entropy of logits.reshape(-1, vocab) against targets.reshape(-1),
    as LanguageModelLoss.
Random init follows the C++ order and distributions: N(0, 0.02) for linear and embedding weights, ones
for norms, drawn from the default CPU generator in registration order.

    model = Llama(LlamaConfig.preset("tiny"))
    load_magi_weights(model, "/tmp/init")      # names and shapes must match one to one
    loss = language_model_loss(model(tokens), targets)
"""

import contextlib
import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import tensor_file


@dataclasses.dataclass
class LlamaConfig:
    vocab_size: int = 256
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    # Key/value heads (grouped-query attention); 0 means n_heads, as LlamaConfig::n_kv_heads in C++.
    n_kv_heads: int = 0
    ffn_hidden: int = 176
    max_seq_len: int = 64
    tie_embeddings: bool = False
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    @property
    def head_dim(self):
        return self.dim // self.n_heads

    @property
    def kv_heads(self):
        return self.n_kv_heads or self.n_heads

    def validate(self):
        """Raises ValueError naming the field when the sizes cannot build a model (LlamaConfig::Validate)."""
        if self.dim % self.n_heads or self.head_dim % 2:
            raise ValueError("dim %d must split into %d heads of even size" % (self.dim, self.n_heads))
        if self.n_kv_heads < 0 or self.n_kv_heads > self.n_heads or self.n_heads % self.kv_heads:
            raise ValueError("n_kv_heads %d must divide n_heads %d (0 means n_heads): each key/value head serves "
                             "an equal group of query heads" % (self.n_kv_heads, self.n_heads))

    def num_parameters(self):
        """As LlamaConfig::NumParameters() in C++."""
        kv_dim = self.kv_heads * self.head_dim
        per_layer = 2 * self.dim * self.dim + 2 * self.dim * kv_dim + 3 * self.dim * self.ffn_hidden + 2 * self.dim
        return self.vocab_size * self.dim * (1 if self.tie_embeddings else 2) + self.n_layers * per_layer + self.dim

    def flops_per_token(self, seq_len):
        """Training FLOPs per token: 6 per parameter plus 12 * layers * dim * seq for attention scores
        (the convention behind issue #12's 5.35e13 FLOP/step for the 1b shape at seq 2048, batch 4)."""
        return 6 * self.num_parameters() + 12 * self.n_layers * self.dim * seq_len

    @staticmethod
    def preset(name):
        if name == "tiny":  # LlamaConfig::Tiny() (whose vocab is 256 too)
            return LlamaConfig()
        if name == "1b":  # issue #12's 953M model
            return LlamaConfig(vocab_size=32000, dim=2048, n_layers=16, n_heads=16, ffn_hidden=5632,
                               max_seq_len=2048, tie_embeddings=False, norm_eps=1e-5, rope_theta=10000.0)
        raise ValueError("unknown model preset %r (known: tiny, 1b)" % (name,))


_skip_init = False


@contextlib.contextmanager
def weights_to_be_loaded():
    """Modules built inside draw no random init (their linear and embedding weights are left as
    torch.empty): for a model whose every parameter load_magi_weights then overwrites. Saves the
    init's seconds on the CPU (~15 s for the 1b shape)."""
    global _skip_init
    previous, _skip_init = _skip_init, True
    try:
        yield
    finally:
        _skip_init = previous


def _init_normal(tensor, std=0.02):
    if _skip_init:
        return
    with torch.no_grad():
        tensor.normal_(0.0, std)


class Linear(nn.Module):
    """y = x W^T; weight [out, in], no bias (the C++ model's linears have none)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        _init_normal(self.weight)

    def forward(self, x):
        return F.linear(x, self.weight)


class Embedding(nn.Module):
    def __init__(self, num_embeddings, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_embeddings, dim))
        _init_normal(self.weight)

    def forward(self, ids):
        return F.embedding(ids, self.weight)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(variance + self.eps) * self.weight


def apply_rotary(x, cos, sin):
    """Rotates pairs (first half, second half) of the last dim of x [.., seq, head_dim] by cos/sin [seq, head_dim/2]."""
    half = x.size(-1) // 2
    x1 = x.narrow(-1, 0, half)
    x2 = x.narrow(-1, half, half)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)


def causal_attention(q, k, v):
    """q, k, v [batch, heads, seq, head_dim]; magi/compat/attention.h's CausalAttention."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
    seq = q.size(-2)
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
    mask = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(mask, -math.inf)
    return torch.matmul(torch.softmax(scores, -1), v)


def repeat_kv_heads(kv, n_heads):
    """Grouped-query attention: kv [batch, kv_heads, seq, head_dim] -> [batch, n_heads, seq, head_dim], each kv
    head repeated for the n_heads / kv_heads query heads that read it (query head h reads kv head
    h // (n_heads / kv_heads)). No op when kv_heads == n_heads."""
    groups = n_heads // kv.size(1)
    return kv if groups == 1 else kv.repeat_interleave(groups, dim=1)


class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_heads = config.n_heads
        self.kv_heads = config.kv_heads
        self.head_dim = config.head_dim
        # wq: dim -> n_heads * head_dim; wk, wv: dim -> kv_heads * head_dim; wo: back to dim.
        self.wq = Linear(config.dim, config.dim)
        self.wk = Linear(config.dim, self.kv_heads * self.head_dim)
        self.wv = Linear(config.dim, self.kv_heads * self.head_dim)
        self.wo = Linear(config.dim, config.dim)

    def forward(self, x, cos, sin):
        batch, seq = x.size(0), x.size(1)

        # Heads laid out [batch, seq, heads, head_dim] (llama.cc's AttentionImpl::forward says why).
        def split(t, heads):
            return t.view(batch, seq, heads, self.head_dim)

        q, k = split(self.wq(x), self.n_heads), split(self.wk(x), self.kv_heads)
        v = split(self.wv(x), self.kv_heads).transpose(1, 2)
        cos, sin = cos.to(q.dtype).unsqueeze(1), sin.to(q.dtype).unsqueeze(1)
        q = apply_rotary(q, cos, sin).transpose(1, 2)
        k = apply_rotary(k, cos, sin).transpose(1, 2)
        attended = causal_attention(q, repeat_kv_heads(k, self.n_heads), repeat_kv_heads(v, self.n_heads))
        return self.wo(attended.transpose(1, 2).reshape(batch, seq, self.n_heads * self.head_dim))


class FeedForward(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.w1 = Linear(config.dim, config.ffn_hidden)
        self.w2 = Linear(config.ffn_hidden, config.dim)
        self.w3 = Linear(config.dim, config.ffn_hidden)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class DecoderBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        # Registration order as in C++ (it fixes named_parameters() order and the random init order).
        self.attention_norm = RMSNorm(config.dim, config.norm_eps)
        self.attention = Attention(config)
        self.ffn_norm = RMSNorm(config.dim, config.norm_eps)
        self.feed_forward = FeedForward(config)

    def forward(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


def rope_tables(config):
    """(cos, sin) [max_seq_len, head_dim/2] in fp32, computed on the CPU as LlamaImpl's constructor does."""
    half = config.head_dim // 2
    inv_freq = 1.0 / torch.pow(config.rope_theta, torch.arange(0, half, dtype=torch.float32) * (2.0 / config.head_dim))
    angles = torch.outer(torch.arange(config.max_seq_len, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


class Llama(nn.Module):
    """tokens [batch, seq] int64 -> logits [batch, seq, vocab]. Built in fp32 on the CPU."""

    def __init__(self, config):
        super().__init__()
        config.validate()
        self.config = config
        self.tok_embeddings = Embedding(config.vocab_size, config.dim)
        self.layers = nn.ModuleList([DecoderBlock(config) for _ in range(config.n_layers)])
        self.norm = RMSNorm(config.dim, config.norm_eps)
        self.output = None if config.tie_embeddings else Linear(config.dim, config.vocab_size)
        cos, sin = rope_tables(config)
        self.register_buffer("rope_cos", cos)
        self.register_buffer("rope_sin", sin)

    def forward(self, tokens):
        seq = tokens.size(1)
        if seq > self.config.max_seq_len:
            raise ValueError("sequence length %d exceeds max_seq_len %d" % (seq, self.config.max_seq_len))
        h = self.tok_embeddings(tokens)
        cos = self.rope_cos.narrow(0, 0, seq)
        sin = self.rope_sin.narrow(0, 0, seq)
        for layer in self.layers:
            h = layer(h, cos, sin)
        h = self.norm(h)
        if self.output is None:
            return F.linear(h, self.tok_embeddings.weight)
        return self.output(h)


def language_model_loss(logits, targets):
    """Mean next-token cross entropy of logits [batch, seq, vocab] against targets [batch, seq]."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def expected_parameter_shapes(config):
    """The C++ Llama's named_parameters() as (name, shape) pairs, in its order."""
    d, f, kv = config.dim, config.ffn_hidden, config.kv_heads * config.head_dim
    shapes = [("tok_embeddings.weight", [config.vocab_size, d])]
    for i in range(config.n_layers):
        p = "layers.%d." % i
        shapes += [(p + "attention_norm.weight", [d])]
        shapes += [(p + "attention.w%s.weight" % w, [kv if w in "kv" else d, d]) for w in "qkvo"]
        shapes += [(p + "ffn_norm.weight", [d]),
                   (p + "feed_forward.w1.weight", [f, d]),
                   (p + "feed_forward.w2.weight", [d, f]),
                   (p + "feed_forward.w3.weight", [f, d])]
    shapes.append(("norm.weight", [d]))
    if not config.tie_embeddings:
        shapes.append(("output.weight", [config.vocab_size, d]))
    return shapes


_BUFFERS = ("rope_cos", "rope_sin")


def load_magi_weights(model, prefix):
    """Copies the tensors of a magi-tensors-v1 file into `model`'s parameters. The file's parameter names
    and shapes must match model.named_parameters() one to one (floating dtypes are converted); it may
    also hold the rope_cos / rope_sin buffers (then they must have the model's shapes and are loaded too).
    Raises tensor_file.TensorFileError naming the file and every mismatch."""
    json_path, _ = tensor_file.split_prefix(prefix)
    entries = {e["name"]: e for e in tensor_file.read_index(prefix)}
    params = dict(model.named_parameters())
    buffers = {name: buf for name, buf in model.named_buffers() if name in _BUFFERS}
    problems = []
    for name in sorted(set(params) - set(entries)):
        problems.append("missing parameter '%s' %s" % (name, list(params[name].shape)))
    for name in sorted(set(entries) - set(params) - set(buffers)):
        problems.append("unexpected tensor '%s' %s (not a parameter of the model)" % (name, entries[name]["shape"]))
    targets = dict(params, **buffers)
    for name in sorted(set(entries) & set(targets)):
        entry, target = entries[name], targets[name]
        if entry["shape"] != list(target.shape):
            problems.append("tensor '%s' has shape %s, the model's is %s" % (name, entry["shape"], list(target.shape)))
        elif entry["dtype"] not in ("float32", "bfloat16", "float16"):
            problems.append("tensor '%s' has dtype %s, expected a floating dtype" % (name, entry["dtype"]))
    if problems:
        raise tensor_file.TensorFileError("%s does not match the model (%d problem%s):\n  %s" %
                                          (json_path, len(problems), "s" if len(problems) > 1 else "",
                                           "\n  ".join(problems)))
    loaded = tensor_file.read_tensors(prefix)
    with torch.no_grad():
        for name, tensor in loaded.items():
            targets[name].copy_(tensor)
    return list(loaded)


def save_magi_weights(model, prefix):
    """Writes model.named_parameters() (fp32, in the C++ order) to PREFIX.json + PREFIX.bin atomically."""
    return tensor_file.write_tensors(prefix, [(n, p.detach().float()) for n, p in model.named_parameters()])
