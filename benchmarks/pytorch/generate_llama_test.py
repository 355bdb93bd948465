"""Tests of generate_llama.py (static-cache greedy generation). Runs under PyTorch 1.13 and 2.x, on the CPU:

    python3 benchmarks/pytorch/generate_llama_test.py

The static cache is checked against the model's unchanged forward over the whole context (full
recompute), in fp32. The torch.compile variant runs only where torch.compile exists (PyTorch >= 2.0;
CI's Debian python has 1.13): by hand with a PyTorch 2.x python (tools/torch_env.py).
"""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import generate_llama  # noqa: E402
import llama  # noqa: E402
import tensor_file  # noqa: E402


def perturbed_model(seed, **overrides):
    """A small fp32 model whose weights are moved off their init (so no logit ties hide a mistake)."""
    config = llama.LlamaConfig(vocab_size=40, dim=32, n_layers=2, n_heads=4, ffn_hidden=48, max_seq_len=32)
    for key, value in overrides.items():
        setattr(config, key, value)
    torch.manual_seed(seed)
    model = llama.Llama(config)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3)
    return model.eval()


def random_prompts(batch, length, vocab, seed):
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


class StaticCacheTest(unittest.TestCase):
    def check_equals_full_recompute(self, model, batch, prompt_len, length, mode="eager"):
        prompts = random_prompts(batch, prompt_len, model.config.vocab_size, seed=batch + prompt_len)
        expected_tokens, expected_logits = generate_llama.generate_full_recompute(model, prompts, length)
        generator = generate_llama.StaticCacheGenerator(model, batch, prompt_len + length, mode)
        out = generator.generate(prompts, length, record_logits=True)
        self.assertEqual(out["tokens"].tolist(), expected_tokens.tolist())
        self.assertEqual(list(out["logits"].shape), [batch, length, model.config.vocab_size])
        scale = expected_logits.abs().max().item()
        self.assertLess((out["logits"] - expected_logits).abs().max().item(), 1e-5 * scale)
        self.assertEqual(out["decode_steps"], length - 1)
        self.assertGreater(out["decode_s"], 0)
        # A second generation on the same cache (rewritten from position 0) gives the same tokens.
        again = generator.generate(prompts, length)
        self.assertEqual(again["tokens"].tolist(), expected_tokens.tolist())
        self.assertTrue(torch.equal(again["first_logits"], out["logits"][:, 0]))
        return out

    def test_equals_full_recompute(self):
        model = perturbed_model(1)
        for batch, prompt_len in ((1, 5), (3, 9)):
            self.check_equals_full_recompute(model, batch, prompt_len, length=12)

    def test_grouped_query_attention_equals_full_recompute(self):
        model = perturbed_model(2, n_kv_heads=2)
        out = self.check_equals_full_recompute(model, 2, 7, length=10)
        generator = generate_llama.StaticCacheGenerator(model, 2, 20)
        self.assertEqual(list(generator.cache.layers[0].k.shape), [2, 2, 20, 8])  # [batch, kv_heads, len, hd]
        self.assertEqual(generator.cache.nbytes(), 2 * 2 * (2 * 2 * 20 * 8) * 4)  # layers x K,V x fp32
        self.assertEqual(list(out["tokens"].shape), [2, 10])

    def test_prefill_logits_are_the_full_forward_bitwise(self):
        model = perturbed_model(3)
        prompts = random_prompts(2, 11, model.config.vocab_size, seed=4)
        generator = generate_llama.StaticCacheGenerator(model, 2, 16)
        out = generator.generate(prompts, 1)
        with torch.no_grad():
            self.assertTrue(torch.equal(out["first_logits"], model(prompts)[:, -1].float()))
        self.assertEqual(out["decode_steps"], 0)

    def test_decode_ignores_cache_positions_past_the_token(self):
        # Positions beyond input_pos hold whatever an earlier, longer generation left: masked out.
        model = perturbed_model(5)
        prompts = random_prompts(1, 6, model.config.vocab_size, seed=6)
        clean = generate_llama.StaticCacheGenerator(model, 1, 30).generate(prompts, 8, record_logits=True)
        dirty = generate_llama.StaticCacheGenerator(model, 1, 30)
        with torch.no_grad():
            for layer in dirty.cache.layers:
                layer.k.normal_(0, 50)
                layer.v.normal_(0, 50)
        got = dirty.generate(prompts, 8, record_logits=True)
        self.assertEqual(got["tokens"].tolist(), clean["tokens"].tolist())
        self.assertLess((got["logits"] - clean["logits"]).abs().max().item(), 1e-5)

    def test_bad_sizes_are_refused(self):
        model = perturbed_model(7)
        generator = generate_llama.StaticCacheGenerator(model, 2, 10)
        with self.assertRaisesRegex(ValueError, "prompt 6 \\+ 6 tokens need 11 cache positions; the cache has 10"):
            generator.generate(random_prompts(2, 6, 40, 0), 6)
        with self.assertRaisesRegex(ValueError, "3 prompts for a generator of batch 2"):
            generator.generate(random_prompts(3, 4, 40, 0), 2)
        with self.assertRaisesRegex(ValueError, "cache length 40 exceeds the model's max_seq_len 32"):
            generate_llama.StaticCacheGenerator(model, 1, 40)
        with self.assertRaisesRegex(ValueError, "mode must be eager or compile"):
            generate_llama.StaticCacheGenerator(model, 1, 8, "jit")

    @unittest.skipUnless(generate_llama.compile_available(), "torch.compile needs PyTorch >= 2.0")
    def test_compiled_equals_full_recompute(self):
        torch._dynamo.reset()
        self.check_equals_full_recompute(perturbed_model(8, n_kv_heads=2), 2, 5, length=6, mode="compile")

    @unittest.skipIf(generate_llama.compile_available(), "PyTorch >= 2.0 has torch.compile")
    def test_compile_mode_without_torch_compile_says_so(self):
        with self.assertRaisesRegex(RuntimeError, "--mode=compile needs torch.compile"):
            generate_llama.StaticCacheGenerator(perturbed_model(9), 1, 8, "compile")


class CommandLineTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="generate_llama_test.", dir=os.environ.get("TEST_TMPDIR"))

    def path(self, name):
        return os.path.join(self.dir, name)

    def test_prompts_are_read_as_examples_generate_reads_them(self):
        with open(self.path("p.txt"), "wb") as f:
            f.write(b"ab\\ncd\n\nxyz!!\n")
        prompts = generate_llama.read_prompts(self.path("p.txt"))
        self.assertEqual(prompts, [b"ab\ncd", b"xyz!!"])
        self.assertEqual(generate_llama.prompt_tensor(prompts, 3).tolist(),
                         [list(b"ab\ncd"), list(b"xyz!!"), list(b"xyz!!")])
        with self.assertRaisesRegex(ValueError, r"different lengths \[3, 5\]"):
            generate_llama.prompt_tensor([b"abc", b"abcde"], 2)
        with open(self.path("empty.txt"), "wb") as f:
            f.write(b"\n\n")
        with self.assertRaisesRegex(ValueError, "has no prompts"):
            generate_llama.read_prompts(self.path("empty.txt"))

    def test_main_writes_the_summary_and_the_tensors(self):
        config = llama.LlamaConfig.preset("tiny")
        torch.manual_seed(11)
        source = llama.Llama(config)
        llama.save_magi_weights(source, self.path("weights"))
        with open(self.path("p.txt"), "wb") as f:
            f.write(b"Sonnet 7: shall\nWhen forty win!\n")
        argv = ["--model=tiny", "--device=cpu", "--dtype=f32", "--weights=" + self.path("weights"),
                "--prompts_file=" + self.path("p.txt"), "--batch_size=2", "--length=6", "--mode=eager",
                "--warmup=1", "--runs=2", "--reference", "--out=" + self.path("o.json"),
                "--tensors_out=" + self.path("t")]
        self.assertEqual(generate_llama.main(argv), 0)
        with open(self.path("o.json")) as f:
            summary = json.load(f)
        self.assertEqual((summary["batch"], summary["prompt_len"], summary["length"], summary["max_len"],
                          summary["decode_steps"], summary["mode"]), (2, 15, 6, 21, 5, "eager"))
        self.assertEqual(len(summary["decode_s_all"]), 2)
        self.assertEqual(summary["weight_bytes"], 4 * config.num_parameters())
        self.assertIsNone(summary["peak_bytes"])  # not measured on the CPU
        tensors = tensor_file.read_tensors(self.path("t"))
        prompts = generate_llama.prompt_tensor(generate_llama.read_prompts(self.path("p.txt")), 2)
        tokens, logits = generate_llama.generate_full_recompute(source.eval(), prompts, 6)
        self.assertEqual(tensors["tokens"].tolist(), tokens.tolist())
        self.assertLess((tensors["logits"] - logits).abs().max().item(), 1e-4)
        self.assertLess((tensors["reference_first_logits"] - logits[:, 0]).abs().max().item(), 1e-5)


if __name__ == "__main__":
    unittest.main()
