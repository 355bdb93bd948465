"""Tests of llama.py, the PyTorch twin of Magi's C++ Llama. Runs under PyTorch 1.13 and 2.x:

    python3 benchmarks/pytorch/llama_test.py

The forward pass and loss are checked against an independent float64 implementation written from the
definitions (one-hot embedding, RoPE as complex rotation, attention one query at a time), not from
llama.py's code.
"""

import math
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import llama  # noqa: E402
import tensor_file  # noqa: E402


def reference_logits(params, config, tokens):
    """Logits [batch, seq, vocab] in float64 straight from the definitions (params: name -> tensor)."""
    p = {name: t.detach().double() for name, t in params.items()}
    batch, seq = tokens.shape
    d, heads = config.dim, config.n_heads
    hd, half = d // heads, d // heads // 2
    group = heads // (config.n_kv_heads or heads)  # query heads per key/value head

    def rmsnorm(x, w):
        return x / torch.sqrt((x * x).sum(-1, keepdim=True) / x.shape[-1] + config.norm_eps) * w

    # RoPE: dims (i, i + half) form the complex number x_i + j x_{i+half}, rotated by pos * theta^(-2i/hd).
    freqs = torch.tensor([config.rope_theta ** (-2.0 * i / hd) for i in range(half)], dtype=torch.float64)
    rotation = torch.polar(torch.ones(seq, half, dtype=torch.float64),
                           torch.arange(seq, dtype=torch.float64)[:, None] * freqs[None, :])

    def rope(x):  # [seq, hd]
        z = torch.complex(x[:, :half], x[:, half:]) * rotation
        return torch.cat([z.real, z.imag], -1)

    one_hot = torch.zeros(batch, seq, config.vocab_size, dtype=torch.float64)
    one_hot.scatter_(2, tokens.unsqueeze(-1), 1.0)
    h = one_hot @ p["tok_embeddings.weight"]
    for layer in range(config.n_layers):
        pre = "layers.%d." % layer
        x = rmsnorm(h, p[pre + "attention_norm.weight"])
        q, k, v = (x @ p[pre + "attention.w%s.weight" % w].t() for w in "qkv")
        out = torch.zeros(batch, seq, d, dtype=torch.float64)
        for b in range(batch):
            for head in range(heads):
                cols = slice(head * hd, (head + 1) * hd)
                kv_cols = slice(head // group * hd, (head // group + 1) * hd)
                qh, kh, vh = rope(q[b, :, cols]), rope(k[b, :, kv_cols]), v[b, :, kv_cols]
                for t in range(seq):
                    scores = (kh[:t + 1] @ qh[t]) / math.sqrt(hd)
                    weights = torch.exp(scores - scores.max())
                    out[b, t, cols] = (weights / weights.sum()) @ vh[:t + 1]
        h = h + out @ p[pre + "attention.wo.weight"].t()
        x = rmsnorm(h, p[pre + "ffn_norm.weight"])
        a = x @ p[pre + "feed_forward.w1.weight"].t()
        gate = a / (1.0 + torch.exp(-a))
        h = h + (gate * (x @ p[pre + "feed_forward.w3.weight"].t())) @ p[pre + "feed_forward.w2.weight"].t()
    h = rmsnorm(h, p["norm.weight"])
    head_weight = p["tok_embeddings.weight"] if config.tie_embeddings else p["output.weight"]
    return h @ head_weight.t()


def reference_loss(logits, targets):
    flat = logits.reshape(-1, logits.shape[-1])
    picked = flat.gather(1, targets.reshape(-1, 1)).squeeze(1)
    return (torch.logsumexp(flat, -1) - picked).mean()


def small_config(**overrides):
    config = llama.LlamaConfig(vocab_size=50, dim=16, n_layers=2, n_heads=2, ffn_hidden=24, max_seq_len=16)
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


def perturbed(model, seed):
    """Moves every parameter (the RMSNorm weights too) off its init so that no term hides behind 1s."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3)
    return model


class LlamaTest(unittest.TestCase):
    def test_parameter_names_shapes_and_order_match_the_cpp_module(self):
        for tied in (False, True):
            config = llama.LlamaConfig.preset("tiny")
            config.tie_embeddings = tied
            model = llama.Llama(config)
            got = [(n, list(p.shape)) for n, p in model.named_parameters()]
            self.assertEqual(got, llama.expected_parameter_shapes(config))
            self.assertEqual(sum(p.numel() for p in model.parameters()), config.num_parameters())
            self.assertEqual(sorted(n for n, _ in model.named_buffers()), ["rope_cos", "rope_sin"])
        # The C++ names, spelled out once (LlamaImpl / DecoderBlockImpl / AttentionImpl / FeedForwardImpl).
        names = [n for n, _ in llama.Llama(llama.LlamaConfig.preset("tiny")).named_parameters()]
        self.assertEqual(names[:10], [
            "tok_embeddings.weight", "layers.0.attention_norm.weight", "layers.0.attention.wq.weight",
            "layers.0.attention.wk.weight", "layers.0.attention.wv.weight", "layers.0.attention.wo.weight",
            "layers.0.ffn_norm.weight", "layers.0.feed_forward.w1.weight", "layers.0.feed_forward.w2.weight",
            "layers.0.feed_forward.w3.weight"])
        self.assertEqual(names[-2:], ["norm.weight", "output.weight"])
        self.assertEqual(len(names), 1 + 2 * 9 + 2)

    def test_presets(self):
        tiny = llama.LlamaConfig.preset("tiny")  # LlamaConfig::Tiny()
        self.assertEqual((tiny.vocab_size, tiny.dim, tiny.n_layers, tiny.n_heads, tiny.ffn_hidden, tiny.max_seq_len,
                          tiny.tie_embeddings, tiny.norm_eps, tiny.rope_theta),
                         (256, 64, 2, 4, 176, 64, False, 1e-5, 10000.0))
        big = llama.LlamaConfig.preset("1b")
        self.assertEqual((big.vocab_size, big.dim, big.n_layers, big.n_heads, big.ffn_hidden, big.max_seq_len,
                          big.tie_embeddings, big.norm_eps, big.rope_theta),
                         (32000, 2048, 16, 16, 5632, 2048, False, 1e-5, 10000.0))
        self.assertEqual(big.num_parameters(), 953223168)  # issue #12's "953M"
        self.assertEqual(sum(math.prod(s) for _, s in llama.expected_parameter_shapes(big)), 953223168)
        # Issue #12: 5.35e13 FLOP/step at seq 2048, batch 4.
        self.assertAlmostEqual(big.flops_per_token(2048) * 4 * 2048 / 1e13, 5.34, places=2)
        with self.assertRaises(ValueError):
            llama.LlamaConfig.preset("7b")

    def test_forward_and_loss_match_an_independent_float64_computation(self):
        for tied in (False, True):
            config = small_config(tie_embeddings=tied)
            torch.manual_seed(1)
            model = perturbed(llama.Llama(config), seed=2)
            g = torch.Generator().manual_seed(3)
            tokens = torch.randint(0, config.vocab_size, (2, 11), generator=g)
            targets = torch.randint(0, config.vocab_size, (2, 11), generator=g)
            expected = reference_logits(dict(model.named_parameters()), config, tokens)
            logits = model(tokens)
            self.assertEqual(list(logits.shape), [2, 11, config.vocab_size])
            self.assertEqual(logits.dtype, torch.float32)
            scale = expected.abs().max().item()
            self.assertLess((logits.double() - expected).abs().max().item(), 2e-5 * scale, "tied=%s" % tied)
            loss = llama.language_model_loss(logits, targets)
            self.assertAlmostEqual(loss.item(), reference_loss(expected, targets).item(), delta=1e-4)
            # float64 end to end: agreement to float64 round-off (the rope tables stay fp32-rounded in both).
            model64 = model.double()
            self.assertLess((model64(tokens) - expected).abs().max().item(), 1e-6 * scale)

    def test_grouped_query_attention_shapes_and_parameters(self):
        config = small_config(n_heads=4, n_kv_heads=2)  # head_dim 4: wk, wv [8, 16]
        model = llama.Llama(config)
        shapes = dict((n, list(p.shape)) for n, p in model.named_parameters())
        self.assertEqual(shapes["layers.0.attention.wq.weight"], [16, 16])
        self.assertEqual(shapes["layers.0.attention.wk.weight"], [8, 16])
        self.assertEqual(shapes["layers.1.attention.wv.weight"], [8, 16])
        self.assertEqual(shapes["layers.0.attention.wo.weight"], [16, 16])
        self.assertEqual(list(shapes.items()), [(n, s) for n, s in llama.expected_parameter_shapes(config)])
        self.assertEqual(sum(p.numel() for p in model.parameters()), config.num_parameters())
        self.assertEqual(config.num_parameters(), small_config().num_parameters() - 2 * 2 * 16 * 8)
        self.assertEqual(llama.LlamaConfig(n_heads=4).kv_heads, 4)  # 0 means n_heads
        for bad in (3, 5, -1):
            with self.assertRaises(ValueError) as ctx:
                llama.Llama(small_config(n_heads=4, n_kv_heads=bad))
            self.assertIn("n_kv_heads %d must divide n_heads 4" % bad, str(ctx.exception))
        # repeat_kv_heads: query head h reads kv head h // (n_heads / kv_heads).
        kv = torch.arange(2.0).view(1, 2, 1, 1).expand(1, 2, 3, 4)
        self.assertEqual(llama.repeat_kv_heads(kv, 4)[0, :, 0, 0].tolist(), [0.0, 0.0, 1.0, 1.0])
        self.assertIs(llama.repeat_kv_heads(kv, 2), kv)

    def test_grouped_query_attention_matches_float64_and_the_repeated_multi_head_model(self):
        config = small_config(n_heads=4, n_kv_heads=2)
        torch.manual_seed(12)
        model = perturbed(llama.Llama(config), seed=13)
        tokens = torch.randint(0, config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(14))
        expected = reference_logits(dict(model.named_parameters()), config, tokens)
        logits = model(tokens)
        self.assertLess((logits.double() - expected).abs().max().item(), 2e-5 * expected.abs().max().item())
        # The multi-head model whose wk/wv hold each kv head's rows once per query head computes the same.
        mha = llama.Llama(small_config(n_heads=4))
        with torch.no_grad():
            for (name, p), (_, q) in zip(mha.named_parameters(), model.named_parameters()):
                if name.endswith(("wk.weight", "wv.weight")):
                    p.copy_(q.view(2, 4, 16).repeat_interleave(2, dim=0).reshape(16, 16))
                else:
                    p.copy_(q)
        self.assertLess((mha(tokens) - logits).abs().max().item(), 1e-5)

    def test_attention_is_causal(self):
        config = small_config()
        torch.manual_seed(4)
        model = perturbed(llama.Llama(config), seed=5)
        tokens = torch.randint(0, config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(6))
        changed = tokens.clone()
        changed[0, 7] = (changed[0, 7] + 1) % config.vocab_size
        a, b = model(tokens), model(changed)
        self.assertTrue(torch.equal(a[:, :7], b[:, :7]))
        self.assertGreater((a[:, 7:] - b[:, 7:]).abs().min(dim=-1).values.min().item(), 0.0)

    def test_rope_rotates_by_position_only(self):
        # The score between query at t and key at s depends on t - s only (relative positions).
        config = small_config()
        cos, sin = llama.rope_tables(config)
        g = torch.Generator().manual_seed(7)
        q, k = torch.randn(config.head_dim, generator=g), torch.randn(config.head_dim, generator=g)
        rq = llama.apply_rotary(q.expand(config.max_seq_len, -1), cos, sin)
        rk = llama.apply_rotary(k.expand(config.max_seq_len, -1), cos, sin)
        self.assertAlmostEqual((rq[5] @ rk[2]).item(), (rq[12] @ rk[9]).item(), places=4)
        self.assertAlmostEqual((rq[0] @ rk[0]).item(), (q @ k).item(), places=5)
        self.assertAlmostEqual(rq[9].norm().item(), q.norm().item(), places=5)

    def test_init_draws_in_the_cpp_order(self):
        # normal(0, 0.02) from the default CPU generator, in registration order; norms are ones and draw nothing.
        config = llama.LlamaConfig.preset("tiny")
        torch.manual_seed(11)
        model = llama.Llama(config)
        torch.manual_seed(11)
        for name, shape in llama.expected_parameter_shapes(config):
            if name.endswith("norm.weight"):
                expected = torch.ones(shape)
            else:
                expected = torch.empty(shape).normal_(0.0, 0.02)
            self.assertTrue(torch.equal(dict(model.named_parameters())[name], expected), name)

    def test_initial_loss_is_near_log_vocab(self):
        config = llama.LlamaConfig.preset("tiny")
        torch.manual_seed(0)
        model = llama.Llama(config)
        g = torch.Generator().manual_seed(1)
        tokens = torch.randint(0, 256, (4, 64), generator=g)
        loss = llama.language_model_loss(model(tokens), torch.randint(0, 256, (4, 64), generator=g))
        self.assertAlmostEqual(loss.item(), math.log(256), delta=0.05)

    def test_bfloat16_forward_is_close_to_float32(self):
        config = small_config()
        torch.manual_seed(8)
        model = perturbed(llama.Llama(config), seed=9)
        tokens = torch.randint(0, config.vocab_size, (2, 10), generator=torch.Generator().manual_seed(10))
        targets = tokens.roll(-1, 1)
        fp32 = llama.language_model_loss(model(tokens), targets).item()
        bf16 = llama.language_model_loss(model.to(torch.bfloat16)(tokens).float(), targets).item()
        self.assertAlmostEqual(bf16, fp32, delta=0.05 * abs(fp32))


class WeightsFileTest(unittest.TestCase):
    def setUp(self):
        self.prefix = os.path.join(tempfile.mkdtemp(prefix="llama_test.", dir=os.environ.get("TEST_TMPDIR")), "w")
        self.config = small_config()

    def test_save_then_load_reproduces_the_model(self):
        torch.manual_seed(1)
        source = perturbed(llama.Llama(self.config), seed=2)
        llama.save_magi_weights(source, self.prefix)
        torch.manual_seed(3)
        target = llama.Llama(self.config)
        names = llama.load_magi_weights(target, self.prefix)
        self.assertEqual(names, [n for n, _ in llama.expected_parameter_shapes(self.config)])
        for (name, a), (_, b) in zip(source.named_parameters(), target.named_parameters()):
            self.assertTrue(torch.equal(a, b), name)
        tokens = torch.randint(0, self.config.vocab_size, (2, 8))
        self.assertTrue(torch.equal(source(tokens), target(tokens)))

    def test_a_model_built_to_be_loaded_draws_nothing(self):
        torch.manual_seed(1)
        source = perturbed(llama.Llama(self.config), seed=2)
        llama.save_magi_weights(source, self.prefix)
        torch.manual_seed(5)
        with llama.weights_to_be_loaded():
            target = llama.Llama(self.config)
        after_build = torch.empty(4).normal_()
        torch.manual_seed(5)
        self.assertTrue(torch.equal(after_build, torch.empty(4).normal_()))  # the build drew nothing
        llama.load_magi_weights(target, self.prefix)
        tokens = torch.randint(0, self.config.vocab_size, (2, 8))
        self.assertTrue(torch.equal(source(tokens), target(tokens)))
        # Outside the block the init draws again.
        torch.manual_seed(3)
        a = llama.Llama(self.config)
        torch.manual_seed(3)
        self.assertTrue(torch.equal(a.output.weight, llama.Llama(self.config).output.weight))

    def test_buffers_in_the_file_are_loaded(self):
        model = llama.Llama(self.config)
        tensors = [(n, p.detach()) for n, p in model.named_parameters()]
        tensors.append(("rope_cos", torch.full_like(model.rope_cos, 0.5)))
        tensor_file.write_tensors(self.prefix, tensors)
        llama.load_magi_weights(model, self.prefix)
        self.assertTrue(torch.equal(model.rope_cos, torch.full_like(model.rope_cos, 0.5)))

    def test_mismatches_are_all_named(self):
        model = llama.Llama(self.config)
        tensors = [(n, p.detach()) for n, p in model.named_parameters() if n != "norm.weight"]
        tensors = [(n, torch.zeros(3, 16) if n == "output.weight" else t) for n, t in tensors]
        tensors += [("layers.2.attention.wq.weight", torch.zeros(16, 16)),
                    ("rope_sin", torch.zeros(5, 4))]
        tensor_file.write_tensors(self.prefix, tensors)
        with self.assertRaises(tensor_file.TensorFileError) as ctx:
            llama.load_magi_weights(model, self.prefix)
        message = str(ctx.exception)
        self.assertIn(self.prefix + ".json does not match the model (4 problems)", message)
        self.assertIn("missing parameter 'norm.weight' [16]", message)
        self.assertIn("unexpected tensor 'layers.2.attention.wq.weight' [16, 16]", message)
        self.assertIn("tensor 'output.weight' has shape [3, 16], the model's is [50, 16]", message)
        self.assertIn("tensor 'rope_sin' has shape [5, 4], the model's is [16, 4]", message)

    def test_integer_weights_are_rejected(self):
        model = llama.Llama(self.config)
        tensors = [(n, p.detach().long() if n == "norm.weight" else p.detach()) for n, p in model.named_parameters()]
        tensor_file.write_tensors(self.prefix, tensors)
        with self.assertRaises(tensor_file.TensorFileError) as ctx:
            llama.load_magi_weights(model, self.prefix)
        self.assertIn("tensor 'norm.weight' has dtype int64, expected a floating dtype", str(ctx.exception))


if __name__ == "__main__":
    unittest.main()
