#!/usr/bin/env python3
"""Greedy generation with a static KV cache for the PyTorch twin of Magi's Llama (llama.py), as gpt-fast
does it: the PyTorch side of benchmarks/generate_1b.py.

    python3 generate_llama.py --model=1b --vocab_size=256 --weights=/tmp/gen/weights --prompts_file=P \\
        --batch_size=8 --length=128 --mode=compile --device=cuda --dtype=bf16 --out=/tmp/gen/b8.json

What runs (the model's own modules and weights; only the attention's bookkeeping is new here):
  - the cache: every layer's keys and values [batch, n_kv_heads, max_len, head_dim] in the model's
    dtype (StaticKvCache), allocated once and written in place with index_copy_ on the position dim;
  - prefill: the prompts [batch, prompt_len] at positions 0.., every layer's keys and values written
    into the cache, attention over the prompt's own keys and values with is_causal (so the prompt's
    logits are the full forward's, op for op); the first token is the argmax of the last position;
  - decode: one token per sequence at position `input_pos` (a device tensor, so one graph serves
    every position), attention over the whole cache under the mask `key position <= input_pos`
    (scaled_dot_product_attention's math backend, as gpt-fast; matmul + masked softmax on PyTorch
    1.13), k/v heads repeated per query group (grouped-query attention) before attention;
  - --mode=eager runs both as they are; --mode=compile runs the decode step under
    torch.compile(mode="reduce-overhead", fullgraph=True) (CUDA graphs on the GPU) and the prefill
    under torch.compile(fullgraph=True), each compiled once for the run's static shapes, with
    gpt-fast's Inductor setting coordinate_descent_tuning=True (batch 1's matrix-vector products
    become tuned Triton reductions instead of cuBLAS calls; --no-coordinate_descent_tuning: off);
  - greedy decoding: argmax of the fp32 logits; the loop keeps the tokens on the device (no host
    synchronisation per token): --length tokens are 1 from the prefill + (length - 1) decode steps.
All prompts of a run have the same length (static shapes: one prefill shape, one decode shape).

Timing: --warmup untimed generations (the first one compiles), then --runs timed ones; each is
timed on the device (CUDA events: prefill = the prompts' forward and the first token, decode = the
length - 1 steps) and the medians are reported. Peak memory: torch.cuda.max_memory_allocated() of
the process after the timed runs (weights, cache, activations, CUDA-graph pools). With --mode=compile
on the GPU, "cudagraph_skips" counts the compiled graphs Inductor ran without a CUDA graph (0 expected).

Writes --out (JSON: times, tokens/s inputs, peak bytes, compile seconds, device name) and, with
--tensors_out=PREFIX, a magi-tensors-v1 file: `tokens` [batch, length] int64 (the greedy tokens),
`logits` [batch, length, vocab] fp32 (what each was drawn from; recorded in the first, untimed
generation), and with --reference `reference_first_logits` [batch, vocab]: the full forward of the
prompts in fp32 with the same weights (the bf16 runs' yardstick).

Inputs as examples:generate takes them: --prompts_file has one prompt per line ("\\n" in a line stands
for a newline), bytes are tokens (--vocab_size=256); --weights=PREFIX is a magi-tensors-v1 file with
the model's fp32 parameters (examples:generate --dump_weights writes it), without it random weights
(seeded --seed, the twin's init).
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import llama  # noqa: E402
import tensor_file  # noqa: E402


class LayerCache(nn.Module):
    """One layer's keys and values [batch, kv_heads, max_len, head_dim], written in place."""

    def __init__(self, batch, kv_heads, max_len, head_dim, dtype, device):
        super().__init__()
        shape = (batch, kv_heads, max_len, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device))
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device))

    def write(self, input_pos, k, v):
        """k, v [batch, kv_heads, seq, head_dim] into positions input_pos [seq]."""
        self.k.index_copy_(2, input_pos, k)
        self.v.index_copy_(2, input_pos, v)


class StaticKvCache(nn.Module):
    """Every layer's LayerCache for `batch` sequences of at most `max_len` positions."""

    def __init__(self, config, batch, max_len, dtype, device):
        super().__init__()
        if max_len > config.max_seq_len:
            raise ValueError("cache length %d exceeds the model's max_seq_len %d (its RoPE tables)" %
                             (max_len, config.max_seq_len))
        self.max_len = max_len
        self.layers = nn.ModuleList([LayerCache(batch, config.kv_heads, max_len, config.head_dim, dtype, device)
                                     for _ in range(config.n_layers)])

    def nbytes(self):
        return sum(b.numel() * b.element_size() for b in self.buffers())


def masked_attention(q, k, v, visible):
    """q [batch, heads, seq, head_dim] over k, v [batch, heads, len, head_dim]; visible bool [seq, len]
    (True: the key is attended)."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=visible)
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
    scores = scores.masked_fill(~visible, -math.inf)
    return torch.matmul(torch.softmax(scores, -1), v)


def _attention_with_cache(attn, x, cos, sin, layer_cache, input_pos, visible):
    batch, seq = x.size(0), x.size(1)

    def split(t, heads):  # [batch, seq, heads, head_dim], as Attention.forward
        return t.view(batch, seq, heads, attn.head_dim)

    q, k = split(attn.wq(x), attn.n_heads), split(attn.wk(x), attn.kv_heads)
    v = split(attn.wv(x), attn.kv_heads).transpose(1, 2)
    cos, sin = cos.to(q.dtype).unsqueeze(1), sin.to(q.dtype).unsqueeze(1)
    q = llama.apply_rotary(q, cos, sin).transpose(1, 2)
    k = llama.apply_rotary(k, cos, sin).transpose(1, 2)
    layer_cache.write(input_pos, k, v)
    if visible is None:  # prefill from position 0: the prompt's own keys and values, causal
        attended = llama.causal_attention(q, llama.repeat_kv_heads(k, attn.n_heads),
                                          llama.repeat_kv_heads(v, attn.n_heads))
    else:
        attended = masked_attention(q, llama.repeat_kv_heads(layer_cache.k, attn.n_heads),
                                    llama.repeat_kv_heads(layer_cache.v, attn.n_heads), visible)
    return attn.wo(attended.transpose(1, 2).reshape(batch, seq, attn.n_heads * attn.head_dim))


def forward_with_cache(model, cache, tokens, input_pos, prefill):
    """Logits [batch, seq, vocab] of tokens [batch, seq] at positions input_pos [seq] (int64, on the device),
    writing their keys and values into `cache`. prefill: the tokens are the whole context from position
    0 (causal attention among them); else attention over the cache's positions <= input_pos."""
    h = model.tok_embeddings(tokens)
    cos = model.rope_cos.index_select(0, input_pos)
    sin = model.rope_sin.index_select(0, input_pos)
    visible = None
    if not prefill:
        visible = torch.arange(cache.max_len, device=tokens.device) <= input_pos.unsqueeze(-1)
    for layer, layer_cache in zip(model.layers, cache.layers):
        h = h + _attention_with_cache(layer.attention, layer.attention_norm(h), cos, sin, layer_cache, input_pos,
                                      visible)
        h = h + layer.feed_forward(layer.ffn_norm(h))
    h = model.norm(h)
    if model.output is None:
        return F.linear(h, model.tok_embeddings.weight)
    return model.output(h)


def prefill(model, cache, tokens, input_pos):
    """(first token [batch, 1], its fp32 logits [batch, vocab]) after the prompts `tokens`."""
    logits = forward_with_cache(model, cache, tokens, input_pos, prefill=True)[:, -1].float()
    return logits.argmax(-1, keepdim=True), logits


def decode_one_token(model, cache, token, input_pos):
    """(next token [batch, 1], its fp32 logits [batch, vocab]) after token [batch, 1] at input_pos [1]."""
    logits = forward_with_cache(model, cache, token, input_pos, prefill=False)[:, -1].float()
    return logits.argmax(-1, keepdim=True), logits


def compile_available():
    return hasattr(torch, "compile")


def _decode_attention_context():
    """gpt-fast's decode runs scaled_dot_product_attention's math backend (one query against the masked
    cache; under torch.compile its ops fuse). A no-op where the backend cannot be chosen."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel(SDPBackend.MATH)
    except ImportError:
        import contextlib
        return contextlib.nullcontext()


class _Clock:
    """Device-side timestamps: CUDA events on the GPU, perf_counter after a sync elsewhere."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def seconds(self, start, end):
        if self.cuda:
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        return end - start


class StaticCacheGenerator:
    """Greedy generation of `length` tokens after prompts [batch, prompt_len] with a static cache of
    max_len positions. mode: "eager" or "compile" (decode under reduce-overhead, prefill compiled)."""

    def __init__(self, model, batch, max_len, mode="eager", coordinate_descent_tuning=True):
        if mode not in ("eager", "compile"):
            raise ValueError("mode must be eager or compile, not %r" % (mode,))
        if mode == "compile" and not compile_available():
            raise RuntimeError("--mode=compile needs torch.compile (PyTorch >= 2.0); this is PyTorch %s" %
                               torch.__version__)
        param = next(model.parameters())
        self.model, self.mode, self.device = model, mode, param.device
        self.cache = StaticKvCache(model.config, batch, max_len, param.dtype, param.device)
        self.batch, self.max_len = batch, max_len
        self._prefill, self._decode = prefill, decode_one_token
        if mode == "compile":
            import torch._inductor.config as inductor_config
            inductor_config.coordinate_descent_tuning = coordinate_descent_tuning
            self._decode = torch.compile(decode_one_token, mode="reduce-overhead", fullgraph=True)
            self._prefill = torch.compile(prefill, fullgraph=True)
        self._clock = _Clock(self.device)

    @torch.no_grad()
    def generate(self, prompts, length, record_logits=False):
        """prompts [batch, prompt_len] int64 on the device -> dict: tokens [batch, length] (device),
        logits [batch, length, vocab] fp32 (with record_logits) or first_logits [batch, vocab],
        prefill_s, decode_s (device time), decode_steps."""
        batch, prompt_len = prompts.shape
        if batch != self.batch:
            raise ValueError("%d prompts for a generator of batch %d" % (batch, self.batch))
        if length < 1 or prompt_len + length - 1 > self.max_len:
            raise ValueError("prompt %d + %d tokens need %d cache positions; the cache has %d" %
                             (prompt_len, length, prompt_len + length - 1, self.max_len))
        clock = self._clock
        start = clock.mark()
        token, logits = self._prefill(self.model, self.cache, prompts,
                                      torch.arange(prompt_len, device=self.device))
        token = token.clone()
        tokens = [token]
        all_logits = [logits.clone()]
        prefilled = clock.mark()
        input_pos = torch.tensor([prompt_len], dtype=torch.long, device=self.device)
        with _decode_attention_context():
            for _ in range(length - 1):
                # The CUDA graph's outputs are overwritten by its next replay: clone what is kept.
                token, logits = self._decode(self.model, self.cache, token, input_pos)
                token = token.clone()
                tokens.append(token)
                if record_logits:
                    all_logits.append(logits.clone())
                input_pos += 1
        end = clock.mark()
        out = {"tokens": torch.cat(tokens, 1), "prefill_s": clock.seconds(start, prefilled),
               "decode_s": clock.seconds(prefilled, end), "decode_steps": length - 1}
        if record_logits:
            out["logits"] = torch.stack(all_logits, 1)
        else:
            out["first_logits"] = all_logits[0]
        return out


@torch.no_grad()
def generate_full_recompute(model, prompts, length):
    """The reference: greedy tokens [batch, length] and their fp32 logits [batch, length, vocab] from the
    model's unchanged forward over the whole context for every token."""
    context = prompts
    tokens, logits = [], []
    for _ in range(length):
        last = model(context)[:, -1].float()
        token = last.argmax(-1, keepdim=True)
        tokens.append(token)
        logits.append(last)
        context = torch.cat([context, token], 1)
    return torch.cat(tokens, 1), torch.stack(logits, 1)


def read_prompts(path):
    """The prompts of a file as examples:generate reads them: one per non-empty line, "\\n" unescaped,
    bytes as tokens. Returns a list of bytes objects."""
    with open(path, "rb") as f:
        lines = [line for line in f.read().split(b"\n") if line]
    if not lines:
        raise ValueError("%s has no prompts" % path)
    return [line.replace(b"\\n", b"\n") for line in lines]


def prompt_tensor(prompts, batch):
    """int64 [batch, prompt_len] of the first `batch` prompts (repeating the last one if there are fewer,
    as examples:generate pads its last batch); every prompt must have the same length."""
    lengths = sorted({len(p) for p in prompts})
    if len(lengths) != 1:
        raise ValueError("the prompts have different lengths %s: a static-cache run needs one prompt length" %
                         lengths)
    rows = [prompts[min(i, len(prompts) - 1)] for i in range(batch)]
    return torch.tensor([list(row) for row in rows], dtype=torch.long)


_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def build_model(args, max_len):
    config = llama.LlamaConfig.preset(args.model)
    config.vocab_size = args.vocab_size
    config.n_kv_heads = args.n_kv_heads
    # examples:generate: max(the preset's max_seq_len, --seq_len); RoPE's rows do not depend on it.
    config.max_seq_len = max(config.max_seq_len, max_len)
    torch.manual_seed(args.seed)
    if not args.weights:
        return llama.Llama(config).eval()
    with llama.weights_to_be_loaded():  # every parameter is overwritten: no init draws
        model = llama.Llama(config)
    llama.load_magi_weights(model, args.weights)
    return model.eval()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="1b", help="llama.py preset: tiny or 1b")
    p.add_argument("--vocab_size", type=int, default=256, help="256: bytes, as examples:generate")
    p.add_argument("--n_kv_heads", type=int, default=0, help="key/value heads (0: n_heads)")
    p.add_argument("--weights", default="", help="magi-tensors-v1 PREFIX with the fp32 parameters")
    p.add_argument("--seed", type=int, default=0, help="random weights' seed (without --weights)")
    p.add_argument("--prompts_file", required=True)
    p.add_argument("--batch_size", type=int, default=1)
    p.add_argument("--length", type=int, default=128, help="tokens generated per prompt")
    p.add_argument("--max_len", type=int, default=0, help="cache positions (0: prompt length + length)")
    p.add_argument("--mode", default="eager", choices=["eager", "compile"])
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bf16", choices=sorted(_DTYPES))
    p.add_argument("--coordinate_descent_tuning", action=argparse.BooleanOptionalAction, default=True,
                   help="--mode=compile: Inductor's coordinate_descent_tuning, as gpt-fast sets it (default on)")
    p.add_argument("--warmup", type=int, default=2, help="untimed generations first (the first compiles)")
    p.add_argument("--runs", type=int, default=3, help="timed generations (medians reported)")
    p.add_argument("--reference", action="store_true",
                   help="also write the prompts' fp32 full-forward logits (reference_first_logits)")
    p.add_argument("--out", required=True, help="the JSON summary")
    p.add_argument("--tensors_out", default="", help="magi-tensors-v1 PREFIX for tokens and logits")
    args = p.parse_args(argv)
    if args.batch_size < 1 or args.length < 1 or args.runs < 1 or args.warmup < 0:
        p.error("--batch_size, --length and --runs must be >= 1, --warmup >= 0")
    return args


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    prompts = prompt_tensor(read_prompts(args.prompts_file), args.batch_size)
    prompt_len = prompts.size(1)
    max_len = args.max_len or prompt_len + args.length
    started = time.perf_counter()
    model = build_model(args, max_len)
    model = model.to(device=device, dtype=_DTYPES[args.dtype])
    # The rope tables stay fp32 (as in training: they are rounded to the activations' dtype in forward).
    model.rope_cos = model.rope_cos.float()
    model.rope_sin = model.rope_sin.float()
    prompts = prompts.to(device)
    print("generate_llama: %s, %d prompts of %d tokens, %d generated, cache %d positions, %s %s (loaded in %.1f s)" %
          (args.mode, args.batch_size, prompt_len, args.length, max_len, args.dtype, device,
           time.perf_counter() - started), flush=True)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    generator = StaticCacheGenerator(model, args.batch_size, max_len, args.mode, args.coordinate_descent_tuning)
    first, compile_s, timed = None, None, []
    for i in range(args.warmup + args.runs):
        t0 = time.perf_counter()
        out = generator.generate(prompts, args.length, record_logits=(i == 0))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        wall = time.perf_counter() - t0
        if i == 0:
            first, compile_s = out, wall
        elif not torch.equal(out["tokens"], first["tokens"]):
            raise RuntimeError("generation %d's greedy tokens differ from the first's" % i)
        if i >= args.warmup:
            timed.append(out)
        print("  %s %d: prefill %.2f ms, decode %.3f ms/step (wall %.2f s)" %
              ("run" if i >= args.warmup else "warm-up", i, 1e3 * out["prefill_s"],
               1e3 * out["decode_s"] / max(1, out["decode_steps"]), wall), flush=True)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    # A compiled step that Inductor could not run as a CUDA graph (it says why in the log) runs its
    # kernels from the host: counted here so that the table's row is not read as CUDA-graph speed.
    skips = None
    if args.mode == "compile" and device.type == "cuda":
        from torch._dynamo.utils import counters
        skips = counters["inductor"]["cudagraph_skips"]
        if skips:
            print("generate_llama: WARNING: %d compiled graph(s) ran without CUDA graphs (see the log above)" % skips,
                  flush=True)
    prefill_s = statistics.median(o["prefill_s"] for o in timed)
    decode_s = statistics.median(o["decode_s"] for o in timed)
    summary = {
        "mode": args.mode, "coordinate_descent_tuning": args.mode == "compile" and args.coordinate_descent_tuning,
        "model": args.model, "dtype": args.dtype, "torch": torch.__version__,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "batch": args.batch_size, "prompt_len": prompt_len, "length": args.length, "max_len": max_len,
        "decode_steps": args.length - 1, "prefill_s": prefill_s, "decode_s": decode_s,
        "prefill_s_all": [o["prefill_s"] for o in timed], "decode_s_all": [o["decode_s"] for o in timed],
        "first_generation_s": compile_s, "peak_bytes": peak, "cudagraph_skips": skips, "cache_bytes": generator.cache.nbytes(),
        "weight_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
    }
    if args.tensors_out:
        tensors = [("tokens", first["tokens"].cpu()), ("logits", first["logits"].cpu())]
        if args.reference:
            del generator  # its cache and graphs
            model = model.float()
            with torch.no_grad():
                tensors.append(("reference_first_logits", model(prompts)[:, -1].float().cpu()))
        tensor_file.write_tensors(args.tensors_out, tensors)
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=1)
    if args.length > 1:
        print("generate_llama: decode %.3f ms/token, %.0f tokens/s" %
              (1e3 * decode_s / (args.length - 1), args.batch_size * (args.length - 1) / decode_s), flush=True)
    print("generate_llama: prefill %.0f tokens/s%s" % (args.batch_size * prompt_len / prefill_s,
                                                       "; peak %.2f GiB" % (peak / 2**30) if peak else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
