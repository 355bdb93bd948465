"""Tests of benchmarks/generate_1b.py and its table (result_tables.generate_1b_table), on the CPU:

    python3 benchmarks/generate_1b_test.py

examples:generate's stderr lines are parsed as the binary prints them (its format strings, and lines
copied from docs/examples.md); the whole harness runs with --dry_run against generate_1b_fake_magi.py,
a stand-in for the binary (the tiny model's twin), so the PyTorch rows, the agreement columns and the
files it writes are checked without the C++ build or a GPU.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "pytorch"))

import generate_1b  # noqa: E402
import llama  # noqa: E402
import result_tables  # noqa: E402

# examples/generate.cc's format strings (C's %lld / %d / %.3f / %.1f), rendered by Python's %.
PREFILL_FORMAT = ("magi: prefill: %d runs, %d sequences (%d after a context overflow), %d context bytes "
                  "(%d bucket positions) in %.3f s: %.1f bytes/s (%.1f positions/s)\n")
DECODE_FORMAT = "magi: decode: %d steps of %d sequences, %d bytes in %.3f s: %.1f bytes/s\n"


class ParseTest(unittest.TestCase):
    def test_lines_as_the_binary_prints_them(self):
        # 8 prompts of 16 bytes, window 144, 127 steps.
        text = ("magi: deterministic mode: ...\n"
                "magi: KV cache 301989888 bytes per rank (16 layers x K,V [8, 16, 144, 128]); decode step planned "
                "peak 1 bytes with the cache donated (updated in place), 2 without (1 more)\n"
                "magi: generated 8 x 128 bytes in 1.23 s (832.5 bytes/s; 128 forwards of 8 sequences, KV cache)\n" +
                PREFILL_FORMAT % (1, 8, 0, 128, 1152, 0.0123456, 128 / 0.0123456, 1152 / 0.0123456) +
                DECODE_FORMAT % (127, 8, 1016, 0.0765432, 1016 / 0.0765432) +
                "magi: peak device memory 2000000000 bytes\n")
        got = generate_1b.parse_magi_log(text)
        self.assertEqual((got["prefill_runs"], got["prefill_sequences"], got["reprefills"], got["prefill_bytes"],
                          got["prefill_positions"]), (1, 8, 0, 128, 1152))
        self.assertEqual((got["decode_steps"], got["decode_batch"], got["decode_bytes"]), (127, 8, 1016))
        # The seconds come from the rate's digits (the printed "0.077 s" has two).
        self.assertAlmostEqual(got["decode_s"], 0.0765432, delta=1e-6)
        self.assertAlmostEqual(got["prefill_s"], 0.0123456, delta=1e-6)
        self.assertEqual(got["peak_bytes"], 2000000000)
        self.assertEqual(got["kv_cache_bytes"], 301989888)

    def test_lines_from_the_docs(self):
        text = ("magi: prefill: 9 runs, 9 sequences (8 after a context overflow), 264 context bytes (576 window "
                "positions) in 0.823 s: 320.7 bytes/s (699.7 positions/s)\n"
                "magi: decode: 291 steps of 1 sequences, 291 bytes in 20.981 s: 13.9 bytes/s\n")
        got = generate_1b.parse_magi_log(text)
        self.assertEqual((got["prefill_runs"], got["reprefills"], got["decode_steps"]), (9, 8, 291))
        self.assertAlmostEqual(got["decode_s"], 291 / 13.9)
        self.assertIsNone(got["peak_bytes"])  # a binary without the line: "-" in the table

    def test_zero_rates_keep_the_printed_seconds(self):
        text = (PREFILL_FORMAT % (1, 1, 0, 4, 8, 0.5, 8.0, 16.0) + DECODE_FORMAT % (0, 1, 0, 0.0, 0.0))
        got = generate_1b.parse_magi_log(text)
        self.assertEqual((got["decode_steps"], got["decode_s"]), (0, 0.0))

    def test_missing_lines_are_named(self):
        with self.assertRaisesRegex(generate_1b.MagiLogError, "x.log has no prefill and no decode lines"):
            generate_1b.parse_magi_log("[rank 0] error: out of memory\n", "x.log")
        with self.assertRaisesRegex(generate_1b.MagiLogError, "has no decode line"):
            generate_1b.parse_magi_log(PREFILL_FORMAT % (1, 1, 0, 4, 8, 0.5, 8.0, 16.0))


class ShapesTest(unittest.TestCase):
    def test_parameter_count_is_the_twins(self):
        for name in ("1b", "tiny"):
            config = llama.LlamaConfig.preset(name)
            config.vocab_size = 256
            self.assertEqual(generate_1b.parameter_count(generate_1b.SHAPES[name]), config.num_parameters())
        config = llama.LlamaConfig.preset("1b")
        config.vocab_size, config.n_kv_heads = 256, 4
        shape = dict(generate_1b.SHAPES["1b"], n_kv_heads=4)
        self.assertEqual(generate_1b.parameter_count(shape), config.num_parameters())
        # Issue #42: "the 1.65 GB of bf16 weights".
        self.assertAlmostEqual(2 * generate_1b.parameter_count(generate_1b.SHAPES["1b"]) / 1e9, 1.65, places=2)

    def test_kv_bytes_per_step(self):
        shape = generate_1b.SHAPES["1b"]
        # Per position: 16 layers x K,V x 16 heads x 128 x 2 bytes = 131072; steps attend 17..143 positions.
        self.assertEqual(generate_1b.kv_bytes_per_step(shape, 1, 16, 128, 2), 131072 * 80)
        self.assertEqual(generate_1b.kv_bytes_per_step(shape, 32, 1024, 128, 2), 32 * 131072 * 1088)
        self.assertEqual(generate_1b.kv_bytes_per_step(shape, 4, 16, 1, 2), 0)

    def test_prompts(self):
        eight = generate_1b.make_prompts(8, 1024)
        self.assertEqual(generate_1b.make_prompts(1, 1024), eight[:1])  # batch 1's prompt is batch 8's first
        self.assertEqual(len(set(eight)), 8)
        self.assertTrue(all(len(p) == 1024 and "\\" not in p and "\n" not in p for p in eight))
        self.assertTrue(all(c in generate_1b.PROMPT_ALPHABET for c in eight[3]))


def row(**overrides):
    r = {"label": "Magi x", "kind": "magi", "batch": 8, "prompt_len": 16, "length": 128, "decode_steps": 127,
         "decode_s": 0.127, "prefill_s": 0.01, "peak_bytes": 3 * 2**30, "weight_bytes": 1.675e9,
         "kv_bytes_per_step": 0.325e9}
    r.update(overrides)
    return r


class TableTest(unittest.TestCase):
    def test_columns(self):
        rows = [row(logits_max_diff=0.03125, logits_rel_diff=0.0125, logits_ok=True, tokens_equal=1024,
                    tokens_total=1024, first_divergence=None),
                row(label="PyTorch y", kind="pytorch", decode_s=0.0635, peak_bytes=None, logits_max_diff=0.5,
                    logits_rel_diff=0.2, logits_ok=False, tokens_equal=1000, tokens_total=1024, first_divergence=40),
                row(label="Magi z", failed="exit status (magi2_b8_p16.log)")]
        table = result_tables.generate_1b_table(rows, 3.35e12)
        lines = table.splitlines()
        self.assertEqual(lines[0], "| run | batch | prompt | decode ms/token | decode tokens/s | HBM share (weights) | "
                                   "HBM share (weights + KV) | prefill tokens/s | peak GiB | first-token logits max "
                                   "abs diff vs fp32 (of max) | greedy tokens = PyTorch eager's |")
        self.assertEqual(lines[1], "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
        # 1 ms per step: 1.675e9 B / 1e-3 s / 3.35e12 B/s = 50%; with 0.325e9 B of KV, 59.7%.
        self.assertEqual(lines[2], "| Magi x | 8 | 16 | 1.000 | 8,000 | 50.0% | 59.7% | 12,800 | 3.00 | "
                                   "0.0312 (1.2%) ok | all 1024 |")
        self.assertEqual(lines[3], "| PyTorch y | 8 | 16 | 0.500 | 16,000 | 100.0% | 119.4% | 12,800 | - | "
                                   "0.5 (20%) OVER | 1000/1024 (first differs at step 40) |")
        self.assertEqual(lines[4], "| Magi z | 8 | 16 | failed: exit status (magi2_b8_p16.log) | - | - | - | - | - | "
                                   "- | - |")

    def test_unknown_device_and_columns(self):
        table = result_tables.generate_1b_table([row()], None, columns=["run", "hbm", "tokens_s"],
                                                headers={"run": "variant"}, labels={"Magi x": "Magi"})
        self.assertEqual(table.splitlines()[2], "| Magi | - | 8,000 |")
        self.assertIn("| variant |", table)
        with self.assertRaisesRegex(ValueError, "unknown column"):
            result_tables.generate_1b_table([row()], None, columns=["mfu"])

    def test_peak_bandwidth_by_device_name(self):
        self.assertEqual(result_tables.hbm_peak_bytes_per_s("NVIDIA H100 80GB HBM3"), 3.35e12)
        self.assertEqual(result_tables.hbm_peak_bytes_per_s("NVIDIA H200"), 4.8e12)
        self.assertIsNone(result_tables.hbm_peak_bytes_per_s("NVIDIA H100 PCIe"))
        self.assertIsNone(result_tables.hbm_peak_bytes_per_s(None))


class DryRunTest(unittest.TestCase):
    """The whole harness on the CPU with the stand-in binary."""

    def run_harness(self, out_dir, extra=(), env=None):
        cmd = [sys.executable, os.path.join(HERE, "generate_1b.py"), "--dry_run", "--out_dir", out_dir,
               "--generate", os.path.join(HERE, "generate_1b_fake_magi.py"), "--batches", "2", "--prompts", "5",
               "--length", "4", "--torch_warmup", "1", "--torch_runs", "1"] + list(extra)
        return subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **(env or {})))

    def test_dry_run_writes_the_table_and_agrees(self):
        out_dir = tempfile.mkdtemp(prefix="generate_1b_test.", dir=os.environ.get("TEST_TMPDIR"))
        proc = self.run_harness(out_dir)
        self.assertEqual(proc.returncode, 0, proc.stdout[-3000:] + proc.stderr[-3000:])
        with open(os.path.join(out_dir, "results.json")) as f:
            results = json.load(f)
        labels = [r["label"] for r in results["rows"]]
        expected = [label for label, _, _ in generate_1b.DRY_MAGI_RUNS] + [generate_1b.EAGER_LABEL]
        if "compile" in proc.stdout and "left out" not in proc.stdout:
            expected.append(generate_1b.PYTORCH_RUNS[1][0])
        self.assertEqual(labels, expected)
        for r in results["rows"]:
            self.assertNotIn("failed", r)
            # fp32 everywhere with the same weights: the same greedy tokens, logits to fp32 rounding.
            self.assertEqual((r["tokens_equal"], r["tokens_total"], r["first_divergence"]), (8, 8, None), r["label"])
            self.assertTrue(r["logits_ok"], r["label"])
            self.assertLess(r["logits_rel_diff"], 1e-5, r["label"])
            self.assertEqual((r["batch"], r["prompt_len"], r["decode_steps"]), (2, 5, 3))
        magi = results["rows"][0]
        self.assertEqual((magi["decode_s"], magi["peak_bytes"]), (0.012, 123456789))
        self.assertEqual(results["meta"]["parameters"], generate_1b.parameter_count(generate_1b.SHAPES["tiny"]))
        with open(os.path.join(out_dir, "table.md")) as f:
            table = f.read()
        self.assertIn(table, proc.stdout)
        self.assertIn("| Magi interpreter | 2 | 5 | 4.000 | 500 |", table)
        self.assertIn("device: cpu; peak HBM bandwidth unknown", table)
        # The first Magi run dumped the weights the PyTorch rows loaded; the prompts are kept.
        for name in ("weights.json", "weights.bin", "prompts_b2_p5.txt", "magi0_b2_p5.log",
                     "pytorch_eager_b2_p5.log", "pytorch_eager_b2_p5.summary.json"):
            self.assertTrue(os.path.exists(os.path.join(out_dir, name)), name)
        commands = [line for line in proc.stdout.splitlines() if line.startswith("+ ")]
        self.assertIn("--dump_weights=" + os.path.join(out_dir, "weights"), commands[0])
        self.assertNotIn("--dump_weights", " ".join(commands[1:]))

    def test_resume_keeps_the_rows_a_run_left(self):
        out_dir = tempfile.mkdtemp(prefix="generate_1b_test.", dir=os.environ.get("TEST_TMPDIR"))
        first = self.run_harness(out_dir, ["--no_compile"])
        self.assertEqual(first.returncode, 0, first.stdout[-3000:])
        # The binary would fail now: every row comes from the files of the first run.
        again = self.run_harness(out_dir, ["--no_compile", "--resume"], {"MAGI_FAKE_GENERATE_FAIL": "1"})
        self.assertEqual(again.returncode, 0, again.stdout[-3000:])
        self.assertEqual([line for line in again.stdout.splitlines() if line.startswith("+ ")], [])
        self.assertEqual(again.stdout.count("kept from an earlier run (--resume)"), 3)
        table = lambda out: out[out.index("| run |"):]  # noqa: E731
        self.assertEqual(table(again.stdout), table(first.stdout))
        with open(os.path.join(out_dir, "results.json")) as f:
            self.assertTrue(json.load(f)["complete"])

    def test_a_failing_binary_is_a_failed_row_and_exit_status_1(self):
        out_dir = tempfile.mkdtemp(prefix="generate_1b_test.", dir=os.environ.get("TEST_TMPDIR"))
        proc = self.run_harness(out_dir, ["--only", "magi", "--magi_runs", "1"], {"MAGI_FAKE_GENERATE_FAIL": "1"})
        self.assertEqual(proc.returncode, 1, proc.stdout[-3000:])
        self.assertIn("| Magi interpreter, deterministic | 2 | 5 | failed: exit status (magi1_b2_p5.log) |",
                      proc.stdout)
        self.assertIn("generate_1b: 1 run(s) failed: Magi interpreter, deterministic", proc.stdout)

    def test_bad_arguments(self):
        proc = self.run_harness(tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR")), ["--only", "jax"])
        self.assertEqual(proc.returncode, 2)
        self.assertIn("--only takes magi and/or pytorch, not jax", proc.stderr)
        proc = self.run_harness(tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR")), ["--magi_runs", "5"])
        self.assertEqual(proc.returncode, 1)
        self.assertIn("--magi_runs=5: the runs are 0..1 (Magi interpreter; Magi interpreter, deterministic)",
                      proc.stderr)
        proc = subprocess.run([sys.executable, os.path.join(HERE, "generate_1b.py"), "--out_dir", "/tmp/x",
                               "--generate", "/nonexistent/generate"], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("--generate /nonexistent/generate does not exist", proc.stderr)


if __name__ == "__main__":
    unittest.main()
