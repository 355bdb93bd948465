"""Tests tools/kernel_breakdown.py on a small synthetic Kineto trace."""
import gzip
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_breakdown  # noqa: E402

TRACE = {"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 500},
    {"ph": "X", "cat": "kernel", "name": "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "ts": 100, "dur": 300, "tid": 7},
    {"ph": "X", "cat": "kernel", "name": "triton_poi_fused_mul_silu_0", "ts": 400, "dur": 50, "tid": 7},
    {"ph": "X", "cat": "kernel", "name": "triton_red_fused__to_copy_mean_pow_1", "ts": 460, "dur": 40, "tid": 7},
    # overlaps the GEMM on another stream: busy time counts it once
    {"ph": "X", "cat": "kernel", "name": "void magi::cuda::(anonymous namespace)::MultiTensorAdamWKernel(...)",
     "ts": 200, "dur": 100, "tid": 9},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "ts": 600, "dur": 100, "tid": 7},
    {"ph": "X", "cat": "kernel", "name": "some_unknown_kernel", "ts": 700, "dur": 10, "tid": 7},
    # TensorIterator's strided path (a "nocast" kernel is not a cast) and its vectorized one.
    {"ph": "X", "cat": "kernel", "ts": 720, "dur": 4, "tid": 7,
     "name": "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<"
             "c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > >(...)"},
    {"ph": "X", "cat": "kernel", "ts": 730, "dur": 2, "tid": 7,
     "name": "void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda(...)"},
]}


class KernelBreakdownTest(unittest.TestCase):
    def test_families_span_busy_and_idle(self):
        result = kernel_breakdown.breakdown(TRACE["traceEvents"])
        self.assertAlmostEqual(result["span_ms"], 0.632)  # 100 .. 732 us
        # [100,400) [400,450) [460,500) [600,710) [720,724) [730,732)
        self.assertAlmostEqual(result["busy_ms"], 0.506)
        self.assertAlmostEqual(result["idle_ms"], 0.126)
        families = result["families"]
        self.assertAlmostEqual(families["gemm"]["ms"], 0.3)
        self.assertAlmostEqual(families["triton pointwise"]["ms"], 0.05)
        self.assertAlmostEqual(families["triton reduction"]["ms"], 0.04)
        self.assertAlmostEqual(families["adamw (magi multi-tensor)"]["ms"], 0.1)
        self.assertAlmostEqual(families["memcpy"]["ms"], 0.1)
        self.assertEqual(families["other"]["count"], 1)
        self.assertAlmostEqual(families["aten elementwise, strided/broadcast"]["ms"], 0.004)
        self.assertAlmostEqual(families["aten copy/cast"]["ms"], 0.002)
        self.assertNotIn("aten::mm", [k["name"] for k in result["kernels"]])  # host ops are not device time
        self.assertEqual(result["streams"], 2)
        self.assertEqual(result["kernels"][0]["family"], "gemm")

    def test_idle_gaps_by_length_and_the_longest_with_their_neighbours(self):
        gaps = kernel_breakdown.breakdown(TRACE["traceEvents"], top_gaps=2)["idle_gaps"]
        # Gaps: 450-460 (10 us), 500-600 (100), 710-720 (10), 724-730 (6); the AdamW kernel on
        # the other stream ends inside the GEMM, so it closes no gap.
        self.assertEqual([(b["gaps"], b["count"]) for b in gaps["by_length"]],
                         [("< 2 us", 0), ("2-5 us", 0), ("5-20 us", 3), ("20-100 us", 0), (">= 100 us", 1)])
        self.assertAlmostEqual(sum(b["ms"] for b in gaps["by_length"]), 0.126)  # the idle time
        self.assertEqual(gaps["longest"][0], {"us": 100.0, "at_ms": 0.4, "after": "triton_red_fused__to_copy_mean_pow_1",
                                              "before": "Memcpy DtoD (Device -> Device)"})
        self.assertEqual(len(gaps["longest"]), 2)
        self.assertEqual(gaps["longest"][1]["us"], 10.0)

    def test_command_line_reads_gzip_and_writes_json(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "t.json.gz")
            with gzip.open(path, "wt") as f:
                json.dump(TRACE, f)
            out = os.path.join(tmp, "b.json")
            run = subprocess.run([sys.executable, kernel_breakdown.__file__, path, "--json", out, "--top", "3"],
                                 capture_output=True, text=True)
            self.assertEqual(run.returncode, 0, run.stderr)
            self.assertIn("| gemm | 0.30 |", run.stdout)
            self.assertIn("busy 0.5 ms (80.1%)", run.stdout)
            self.assertIn("| >= 100 us | 1 | 0.10 |", run.stdout)
            with open(out) as f:
                self.assertEqual(json.load(f)["device_events"], 8)

    def test_edges_put_host_and_device_events_on_one_timeline(self):
        events = TRACE["traceEvents"] + [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 50, "dur": 40},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "ts": 740, "dur": 8},
            {"ph": "i", "cat": "cuda_runtime", "name": "marker", "ts": 745},  # no duration: not an event here
        ]
        first, last = kernel_breakdown.edges(events, 2)
        self.assertEqual(first[0], "first 2")
        self.assertEqual([(r["at_us"], r["where"], r["name"]) for r in first[1]],
                         [(0.0, "host", "aten::mm"), (50.0, "host", "cudaGraphLaunch")])
        self.assertEqual([(r["at_us"], r["us"], r["where"]) for r in last[1]],
                         [(730.0, 2.0, "device"), (740.0, 8.0, "host")])
        whole = kernel_breakdown.edges(events, 100)
        self.assertEqual(len(whole), 1)
        self.assertEqual(len(whole[0][1]), len(events) - 1)
        with self.assertRaisesRegex(ValueError, "no host events"):
            kernel_breakdown.edges(TRACE["traceEvents"][1:], 2)

    def test_a_trace_without_device_events_is_refused_clearly(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "cpu.json")
            with open(path, "w") as f:
                json.dump({"traceEvents": [TRACE["traceEvents"][0]]}, f)
            run = subprocess.run([sys.executable, kernel_breakdown.__file__, path], capture_output=True, text=True)
            self.assertEqual(run.returncode, 1)
            self.assertIn("has no device kernels", run.stderr)


if __name__ == "__main__":
    unittest.main()
