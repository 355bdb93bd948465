#!/usr/bin/env python3
"""Generation with the 953M Llama shape on one GPU: Magi's examples:generate against PyTorch with a
static KV cache (eager, and torch.compile reduce-overhead), in ONE run (issue #42's benchmark).

The model: llama.py's "1b" preset (16 layers, dim 2048, 16 heads, ffn 5632) with the byte vocabulary
(256), bf16, random weights. For every batch (--batches) and prompt length (--prompts), with
--length generated tokens (greedy), it runs one after another on the same GPU:
  Magi examples:generate, one process per row of MAGI_RUNS (the first also writes the weights with
  --dump_weights; --seq_len = prompt + length, the window Magi's prefill computes whole);
  PyTorch (benchmarks/pytorch/generate_llama.py), eager and torch.compile reduce-overhead, each in
  its own process, with the same weights (load_magi_weights) and prompts.
Every run generates from the same prompts (printable ASCII, seeded; batch b's prompts are the first
b of the largest batch's). Prints one Markdown table and writes results.json, table.md, the prompts,
every run's log, tokens and logits under --out_dir:

  python3 benchmarks/generate_1b.py --generate bazel-bin/examples/generate --out_dir $OUT
  python3 benchmarks/generate_1b.py ... --batches 1,8 --prompts 16 --only magi,pytorch --magi_runs 0,2
  python3 benchmarks/generate_1b.py --dry_run --generate bazel-bin/examples/generate --out_dir /tmp/g
results.json is rewritten after every row; --resume (the same command again) keeps the rows whose
files an earlier, cut-short run left and runs the rest, then prints the whole table.

Columns (per row: one Magi process, or the median of --runs timed PyTorch generations):
  decode ms/token   the decode steps' time / steps (length - 1 steps: the first token comes from the
                    prefill); Magi: its "magi: decode:" line (host clock; the steps run back to back,
                    tokens and logits read once per 16 steps); PyTorch: CUDA events around the loop
                    (no host synchronisation per token);
  decode tokens/s   batch x steps / decode time;
  HBM share         bytes a decode step must read / step time / the GPU's peak bandwidth (by its
                    name: result_tables.HBM_PEAK_BYTES_PER_S, or --peak_bandwidth): the weights once
                    (bf16), and with "+ KV" also the keys and values of the positions each step
                    attends (batch x layers x 2 x kv heads x head_dim x 2 bytes x (prompt + length/2)
                    on average);
  prefill tokens/s  batch x prompt length / prefill time (Magi computes the whole window, prompt and
                    padding, in its prefill; its "bytes/s" counts the prompt's bytes);
  peak GiB          Magi: "magi: peak device memory" (torch.cuda max allocated); PyTorch: the same
                    counter of its process;
  logits            max |first-token logits - fp32 reference| over the batch (the reference: the
                    prompts' full forward in fp32 with the same weights, by PyTorch), and that over
                    max |reference|; "ok" when within --logits_tol of max |reference| (default 5%:
                    bf16 eager against fp32 on the CPU differed by 1.65% for 4 prompts of 16 bytes);
  greedy tokens     how many of the batch x length greedy tokens equal PyTorch eager's, and the first
                    step where a sequence differs (after a near-tie in bf16 the texts part ways).

--dry_run: the tiny model (llama.py "tiny", vocab 256) in fp32 on the CPU, batches 1,2, prompts 4,16,
length 8, Magi's interpreter rows (DRY_MAGI_RUNS): the parsing, tables and the PyTorch side without a GPU.
A --generate path ending in .py runs under this python (the tests' stand-in for the binary).
"""
import argparse
import json
import os
import random
import re
import shutil
import string
import subprocess
import sys
import time

from result_tables import generate_1b_table, hbm_peak_bytes_per_s

HERE = os.path.dirname(os.path.abspath(__file__))

MAGI_RUNS = [
    # (label, --backend, more examples:generate flags; "{batch}" is replaced by the row's batch,
    # "{timeline}" by <out_dir>/<row tag>.timeline.json)
    ("Magi nccl_stream + CUDA graph", "nccl_stream{cuda_graph=true}", []),
    ("Magi nccl_stream + CUDA graph + inductor", "nccl_stream{cuda_graph=true}", ["--partition_backends=inductor"]),
    # Batch-invariant: every graph has `batch` rows (--invariant_batch), run batched at that shape.
    ("Magi nccl_stream + CUDA graph, deterministic", "nccl_stream{cuda_graph=true}",
     ["--deterministic", "--invariant_batch={batch}"]),
    # The same with the Inductor partitions, compiled in deterministic mode (the row issue #42's
    # "at most 15% slower than the default mode" compares with row 1).
    ("Magi nccl_stream + CUDA graph + inductor, deterministic", "nccl_stream{cuda_graph=true}",
     ["--partition_backends=inductor", "--deterministic", "--invariant_batch={batch}"]),
    # The decode step as ONE persistent kernel (docs/megakernel.md); prefill on the Inductor partitions.
    # The kernel's timeline of the last decode step goes to <tag>.timeline.json, its summary to the log.
    ("Magi nccl_stream + CUDA graph + megakernel", "nccl_stream{cuda_graph=true}",
     ["--partition_backends=megakernel,inductor", "--megakernel_timeline={timeline}"]),
    # Its first form, each matrix row reading its input from L2 (what staging them saves).
    ("Magi nccl_stream + CUDA graph + megakernel, inputs from L2", "nccl_stream{cuda_graph=true}",
     ["--partition_backends=megakernel{stage_inputs=false},inductor", "--megakernel_timeline={timeline}"]),
    # The decode graph's attention in its math form (as gpt-fast decodes), which the Inductor
    # partitions fuse: no cuDNN attention kernel, whose integer results cut the step, per layer.
    ("Magi nccl_stream + CUDA graph + inductor, math attention", "nccl_stream{cuda_graph=true}",
     ["--partition_backends=inductor", "--decode_attention=math"]),
    # The megakernel with plain vector loads of the weights instead of the bulk-copy ring (what
    # streaming them ahead of each instruction's wait saves).
    ("Magi nccl_stream + CUDA graph + megakernel, plain weight loads", "nccl_stream{cuda_graph=true}",
     ["--partition_backends=megakernel{stream_weights=false},inductor", "--megakernel_timeline={timeline}"]),
    # The megakernel with attention unsplit: one instruction per (kv group, sequence) instead of
    # the positions split over the idle SMs and combined.
    ("Magi nccl_stream + CUDA graph + megakernel, attention unsplit", "nccl_stream{cuda_graph=true}",
     ["--partition_backends=megakernel{attention_splits=1},inductor", "--megakernel_timeline={timeline}"]),
    # The megakernel's tiles on the tensor cores (inputs staged in bf16, plain weight loads).
    ("Magi nccl_stream + CUDA graph + megakernel, tensor cores", "nccl_stream{cuda_graph=true}",
     ["--partition_backends=megakernel{tensor_cores=true},inductor", "--megakernel_timeline={timeline}"]),
]
DRY_MAGI_RUNS = [
    ("Magi interpreter", "interpreter", []),
    ("Magi interpreter, deterministic", "interpreter", ["--deterministic", "--invariant_batch={batch}"]),
]
PYTORCH_RUNS = [
    ("PyTorch eager, static KV cache", "eager"),
    ("PyTorch torch.compile reduce-overhead, static KV cache", "compile"),
]
EAGER_LABEL = PYTORCH_RUNS[0][0]

# The model shapes (llama.py's presets with the byte vocabulary); standard library only here.
SHAPES = {
    "1b": {"vocab_size": 256, "dim": 2048, "n_layers": 16, "n_heads": 16, "n_kv_heads": 0, "ffn_hidden": 5632},
    "tiny": {"vocab_size": 256, "dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 0, "ffn_hidden": 176},
}
PROMPT_ALPHABET = string.ascii_letters + string.digits + " .,;:!?'-"  # no backslash: "\n" is an escape


def parameter_count(shape):
    """llama.LlamaConfig.num_parameters() of an untied shape (SHAPES)."""
    d, f = shape["dim"], shape["ffn_hidden"]
    kv_dim = (shape["n_kv_heads"] or shape["n_heads"]) * (d // shape["n_heads"])
    per_layer = 2 * d * d + 2 * d * kv_dim + 3 * d * f + 2 * d
    return shape["vocab_size"] * d * 2 + shape["n_layers"] * per_layer + d


def kv_bytes_per_step(shape, batch, prompt_len, length, element_bytes):
    """The keys and values a decode step attends, averaged over the length - 1 steps: step i (1..length-1)
    attends prompt_len + i positions."""
    if length < 2:
        return 0
    per_position = shape["n_layers"] * 2 * (shape["n_kv_heads"] or shape["n_heads"]) * (
        shape["dim"] // shape["n_heads"]) * element_bytes
    mean_positions = prompt_len + length / 2.0
    return batch * per_position * mean_positions


def make_prompts(count, length, seed=0):
    """`count` prompts of `length` printable bytes; prompt i does not depend on count."""
    return ["".join(random.Random("%d/%d/%d" % (seed, length, i)).choice(PROMPT_ALPHABET) for _ in range(length))
            for i in range(count)]


_FLOAT = r"([0-9.eE+-]+|inf|nan)"
_MAGI_LINES = {
    "prefill": re.compile(r"^magi: prefill: (\d+) runs, (\d+) sequences \((\d+) after a context overflow\), (\d+) "
                          r"context bytes \((\d+) (?:bucket|window) positions\) in " + _FLOAT + r" s: " + _FLOAT +
                          r" bytes/s \(" + _FLOAT + r" positions/s\)", re.M),
    "decode": re.compile(r"^magi: decode: (\d+) steps of (\d+) sequences, (\d+) bytes in " + _FLOAT + r" s: " +
                         _FLOAT + r" bytes/s", re.M),
    "peak": re.compile(r"^magi: peak device memory (\d+) bytes", re.M),
    "kv_cache": re.compile(r"^magi: KV cache (\d+) bytes per rank", re.M),
}


class MagiLogError(ValueError):
    pass


def _seconds(count, rate, printed):
    """The seconds behind a rate: count / rate has more digits than the %.3f-printed seconds."""
    return count / rate if rate > 0 and count > 0 else printed


def parse_magi_log(text, name="the log"):
    """The numbers of examples:generate's stderr lines (prefill, decode, peak memory; KV cache if
    printed). Raises MagiLogError naming the missing lines."""
    found = {key: pattern.findall(text) for key, pattern in _MAGI_LINES.items()}
    missing = [key for key in ("prefill", "decode") if not found[key]]
    if missing:
        raise MagiLogError("%s has no %s line%s (\"magi: %s: ...\")" % (
            name, " and no ".join(missing), "s" if len(missing) > 1 else "", ": ...\", \"magi: ".join(missing)))
    p = found["prefill"][-1]
    d = found["decode"][-1]
    prefill_bytes, prefill_printed, prefill_rate = int(p[3]), float(p[5]), float(p[6])
    decode_steps, decode_bytes, decode_printed, decode_rate = int(d[0]), int(d[2]), float(d[3]), float(d[4])
    return {
        "prefill_runs": int(p[0]), "prefill_sequences": int(p[1]), "reprefills": int(p[2]),
        "prefill_bytes": prefill_bytes, "prefill_positions": int(p[4]),
        "prefill_s": _seconds(prefill_bytes, prefill_rate, prefill_printed),
        "decode_steps": decode_steps, "decode_batch": int(d[1]), "decode_bytes": decode_bytes,
        "decode_s": _seconds(decode_bytes, decode_rate, decode_printed),
        "peak_bytes": int(found["peak"][-1]) if found["peak"] else None,
        "kv_cache_bytes": int(found["kv_cache"][-1]) if found["kv_cache"] else None,
    }


def run(cmd, log_path, env=None, timeout=1800):
    """Runs cmd with stdout and stderr into log_path; True when it exits 0 (else prints the log's tail)."""
    print("+", " ".join(cmd), flush=True)
    start = time.time()
    with open(log_path, "w") as log:
        try:
            proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = "timeout after %d s" % timeout
    seconds = time.time() - start
    if code != 0:
        with open(log_path, errors="replace") as log:
            tail = log.read()[-3000:]
        print(f"FAILED ({code}) after {seconds:.0f} s:\n{tail}", flush=True)
        return False
    print(f"  done in {seconds:.0f} s", flush=True)
    return True


def torch_compile_available():
    """Whether this python's PyTorch (which runs the PyTorch rows) has torch.compile."""
    import torch
    return hasattr(torch, "compile")


def _executable(path):
    """A .py stand-in runs under this python; anything else as it is."""
    return [sys.executable, path] if path.endswith(".py") else [path]


class Bench:
    def __init__(self, args):
        self.args = args
        self.dry = args.dry_run
        self.model = "tiny" if self.dry else "1b"
        self.shape = SHAPES[self.model]
        self.dtype = "f32" if self.dry else "bf16"
        self.element_bytes = 4 if self.dry else 2
        self.device = "cpu" if self.dry else "cuda"
        self.out = args.out_dir
        self.weights = os.path.join(self.out, "weights")
        self.env = dict(os.environ, NCCL_NVLS_ENABLE="0")
        # Triton builds its helpers with $CC: the GPU image's on-device.sh points CC at a compiler for
        # Bazel that Triton cannot use, so inductor and PyTorch runs get the default (as fsdp_1b.py).
        self.torch_env = {k: v for k, v in self.env.items() if k not in ("CC", "CXX")}
        self.rows = []
        self.device_name = None
        if not args.resume:  # this run's first Magi row writes them again
            for suffix in (".json", ".bin"):
                if os.path.exists(self.weights + suffix):
                    os.remove(self.weights + suffix)
        self.compile = args.compile and torch_compile_available()
        if args.compile and not self.compile:
            print("generate_1b: this python's PyTorch has no torch.compile: the compile rows are left out", flush=True)

    def prompts_file(self, batch, prompt_len):
        path = os.path.join(self.out, "prompts_b%d_p%d.txt" % (batch, prompt_len))
        with open(path, "w") as f:
            f.write("".join(p + "\n" for p in make_prompts(batch, prompt_len)))
        return path

    def base_row(self, label, kind, batch, prompt_len, tag):
        length = self.args.length
        return {"label": label, "kind": kind, "tag": tag, "batch": batch, "prompt_len": prompt_len,
                "length": length, "weight_bytes": parameter_count(self.shape) * self.element_bytes,
                "kv_bytes_per_step": kv_bytes_per_step(self.shape, batch, prompt_len, length, self.element_bytes)}

    def magi_flags(self, batch, prompt_len, prompts):
        return ["--model=" + self.model, "--dtype=" + self.dtype, "--device=" + self.device, "--world_size=1",
                "--checkpoint_dir=", "--seq_len=%d" % (prompt_len + self.args.length),
                "--length=%d" % self.args.length, "--batch_size=%d" % batch, "--prompts_file=" + prompts,
                "--warmup_forwards=%d" % self.args.magi_warmup, "--progress_s=0"]

    def reusable(self, *paths):
        """With --resume: whether an earlier run left a row's files (its log or summary, its tensors)."""
        if not self.args.resume or not all(os.path.exists(p) for p in paths):
            return False
        if paths[0].endswith(".log"):
            with open(paths[0], errors="replace") as f:
                try:
                    parse_magi_log(f.read())
                except MagiLogError:
                    return False
        return True

    def add(self, row):
        """Keeps a row and rewrites results.json with the rows so far (a run cut short keeps them)."""
        self.rows.append(row)
        with open(os.path.join(self.out, "results.json"), "w") as f:
            json.dump({"meta": None, "rows": self.rows, "complete": False}, f, indent=1)

    def have_weights(self):
        return os.path.exists(self.weights + ".json") and os.path.exists(self.weights + ".bin")

    def run_magi(self, index, run_spec, batch, prompt_len, prompts):
        label, backend, extra = run_spec
        tag = "magi%d_b%d_p%d" % (index, batch, prompt_len)
        row = self.base_row(label, "magi", batch, prompt_len, tag)
        cmd = _executable(self.args.generate) + self.magi_flags(batch, prompt_len, prompts) + [
            "--backend=" + backend, "--logits_out=" + os.path.join(self.out, tag)]
        cmd += [flag.replace("{batch}", str(batch)).replace("{timeline}", os.path.join(self.out, tag + ".timeline.json"))
                for flag in extra]
        if not self.have_weights():
            cmd.append("--dump_weights=" + self.weights)
        uses_inductor = any(flag.startswith("--partition_backends=") for flag in extra)
        log = os.path.join(self.out, tag + ".log")
        if self.reusable(log, os.path.join(self.out, tag + ".json")):
            print("  %s: kept from an earlier run (--resume)" % tag, flush=True)
        elif not run(cmd, log, self.torch_env if uses_inductor else self.env, timeout=self.args.timeout):
            row["failed"] = "exit status (%s)" % os.path.basename(log)
            return row
        with open(log, errors="replace") as f:
            try:
                row.update(parse_magi_log(f.read(), log))
            except MagiLogError as e:
                row["failed"] = str(e)
                print("  " + str(e), flush=True)
                return row
        row["tensors"] = os.path.join(self.out, tag)
        print("  decode %.3f ms/token, prefill %.3f s" % (1e3 * row["decode_s"] / max(1, row["decode_steps"]),
                                                          row["prefill_s"]), flush=True)
        return row

    def dump_weights(self):
        """The weights without a timed Magi row: examples:generate with one generated byte."""
        prompts = self.prompts_file(1, 4)
        flags = self.magi_flags(1, 4, prompts)
        flags = [f for f in flags if not f.startswith(("--length=", "--seq_len=", "--warmup_forwards="))]
        cmd = _executable(self.args.generate) + flags + ["--length=1", "--seq_len=8", "--warmup_forwards=0",
                                                         "--backend=interpreter", "--dump_weights=" + self.weights]
        if not run(cmd, os.path.join(self.out, "dump_weights.log"), self.env, timeout=self.args.timeout):
            raise SystemExit("generate_1b: examples:generate could not write the weights (dump_weights.log)")

    def run_pytorch(self, label, mode, batch, prompt_len, prompts):
        tag = "pytorch_%s_b%d_p%d" % (mode, batch, prompt_len)
        row = self.base_row(label, "pytorch", batch, prompt_len, tag)
        summary = os.path.join(self.out, tag + ".summary.json")  # tag.json/.bin: the tensors
        cmd = [sys.executable, os.path.join(HERE, "pytorch", "generate_llama.py"), "--model=" + self.model,
               "--vocab_size=%d" % self.shape["vocab_size"], "--weights=" + self.weights, "--prompts_file=" + prompts,
               "--batch_size=%d" % batch, "--length=%d" % self.args.length, "--mode=" + mode,
               "--device=" + self.device, "--dtype=" + self.dtype, "--warmup=%d" % self.args.torch_warmup,
               "--runs=%d" % self.args.torch_runs, "--out=" + summary, "--tensors_out=" + os.path.join(self.out, tag)]
        if mode == "eager":
            cmd.append("--reference")
        if self.reusable(summary, os.path.join(self.out, tag + ".json")):
            print("  %s: kept from an earlier run (--resume)" % tag, flush=True)
        elif not run(cmd, os.path.join(self.out, tag + ".log"), self.torch_env, timeout=self.args.timeout):
            row["failed"] = "exit status (%s.log)" % tag
            return row
        with open(summary) as f:
            s = json.load(f)
        row.update({key: s[key] for key in ("prefill_s", "decode_s", "decode_steps", "peak_bytes", "prefill_s_all",
                                            "decode_s_all", "first_generation_s", "cache_bytes", "torch")})
        if s.get("cudagraph_skips"):
            row["label"] += " (%d graph(s) without CUDA graphs)" % s["cudagraph_skips"]
        row["tensors"] = os.path.join(self.out, tag)
        if s.get("device_name") and s["device_name"] != "cpu":
            self.device_name = s["device_name"]
        return row

    def run_all(self):
        args = self.args
        wanted = set(args.only.split(","))
        magi_runs = DRY_MAGI_RUNS if self.dry else MAGI_RUNS
        picked = [int(i) for i in args.magi_runs.split(",") if i] or list(range(len(magi_runs)))
        if any(i < 0 or i >= len(magi_runs) for i in picked):
            raise SystemExit("generate_1b: --magi_runs=%s: the runs are 0..%d (%s)" % (
                args.magi_runs, len(magi_runs) - 1, "; ".join(label for label, _, _ in magi_runs)))
        for batch in args.batches:
            for prompt_len in args.prompts:
                print("== batch %d, prompt %d, %d generated" % (batch, prompt_len, args.length), flush=True)
                prompts = self.prompts_file(batch, prompt_len)
                if "magi" in wanted:
                    for index in picked:
                        self.add(self.run_magi(index, magi_runs[index], batch, prompt_len, prompts))
                if "pytorch" in wanted:
                    if not self.have_weights():
                        self.dump_weights()
                    for label, mode in PYTORCH_RUNS:
                        if mode == "compile" and not self.compile:
                            continue
                        self.add(self.run_pytorch(label, mode, batch, prompt_len, prompts))
        compare_rows(self.rows, args.logits_tol)


def load_outputs(row):
    """(first-token logits [batch, vocab] fp32, tokens [batch, length] int64, reference or None) of a row's
    tensor file: Magi's prompt.<i>.logits / prompt.<i>.tokens, or generate_llama.py's logits / tokens."""
    sys.path.insert(0, os.path.join(HERE, "pytorch"))
    import tensor_file
    import torch
    t = tensor_file.read_tensors(row["tensors"])
    if row["kind"] == "pytorch":
        return t["logits"][:, 0].float(), t["tokens"].long(), t.get("reference_first_logits")
    first = torch.stack([t["prompt.%d.logits" % i][0].float() for i in range(row["batch"])])
    tokens = torch.stack([t["prompt.%d.tokens" % i].long() for i in range(row["batch"])])
    return first, tokens, None


def token_agreement(tokens, reference):
    """(equal tokens, total, first step where a sequence differs or None) of tokens vs reference [batch, length]."""
    equal = tokens == reference
    differs = (~equal).any(0).nonzero()
    return int(equal.sum()), equal.numel(), (int(differs[0]) if differs.numel() else None)


def compare_rows(rows, tolerance):
    """Adds each row's logits and token agreement against the fp32 reference and PyTorch eager's tokens
    of the same batch and prompt length (found among `rows`)."""
    outputs = {}
    for row in rows:
        if not row.get("failed") and row.get("tensors"):
            try:
                outputs[row["tag"]] = load_outputs(row)
            except Exception as e:  # a row whose files cannot be read is reported, not fatal
                row["compare_error"] = "%s: %s" % (type(e).__name__, e)
    for row in rows:
        if row["tag"] not in outputs:
            continue
        eager = [r for r in rows if r["label"] == EAGER_LABEL and r["batch"] == row["batch"]
                 and r["prompt_len"] == row["prompt_len"] and r["tag"] in outputs]
        if not eager:
            continue
        first, tokens, _ = outputs[row["tag"]]
        _, eager_tokens, reference = outputs[eager[0]["tag"]]
        if reference is not None and reference.shape == first.shape:
            diff = float((first - reference.float()).abs().max())
            scale = float(reference.abs().max())
            row.update({"logits_max_diff": diff, "logits_rel_diff": diff / scale if scale else float("inf"),
                        "logits_ok": diff <= tolerance * scale})
        if tokens.shape == eager_tokens.shape:
            equal, total, first_diff = token_agreement(tokens, eager_tokens)
            row.update({"tokens_equal": equal, "tokens_total": total, "first_divergence": first_diff})


def device_name_from_nvidia_smi():
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    return out[0] if out else None


def notes(meta, tolerance):
    """The lines under the table: what the columns were computed with."""
    peak = meta["peak_bytes_per_s"]
    lines = ["device: %s; peak HBM bandwidth %s" % (meta["device_name"] or "unknown",
                                                    "%.3g bytes/s" % peak if peak else "unknown (no HBM share)"),
             "model: %s shape, vocab %d, %s: %d parameters, %.3g bytes of weights read per decode step" % (
                 meta["model"], meta["shape"]["vocab_size"], meta["dtype"], meta["parameters"],
                 meta["weight_bytes"]),
             "first-token logits: max abs difference from the fp32 full forward of the prompts (same weights), "
             "'ok' within %g of max |reference|" % tolerance]
    return "\n".join("- " + line for line in lines) + "\n"


def write_results(rows, meta, out_dir, tolerance):
    """Prints the table and writes table.md and results.json ({"meta", "rows", "complete"}) into out_dir."""
    table = generate_1b_table(rows, meta["peak_bytes_per_s"]) + "\n" + notes(meta, tolerance)
    print("\n" + table, end="", flush=True)
    with open(os.path.join(out_dir, "table.md"), "w") as f:
        f.write(table)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows, "complete": True}, f, indent=1)
    return table


def _ints(text):
    try:
        values = [int(v) for v in text.split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError("expected comma-separated integers, not %r" % text)
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("expected positive integers, not %r" % text)
    return values


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--generate", default="bazel-bin/examples/generate", help="examples:generate's binary")
    parser.add_argument("--out_dir", required=True)
    parser.add_argument("--batches", type=_ints, default=None, help="default 1,8,32 (dry run: 1,2)")
    parser.add_argument("--prompts", type=_ints, default=None, help="prompt lengths; default 16,1024 (dry run: 4,16)")
    parser.add_argument("--length", type=int, default=None, help="generated tokens; default 128 (dry run: 8)")
    parser.add_argument("--only", default="magi,pytorch", help="magi, pytorch or both")
    parser.add_argument("--magi_runs", default="", help="comma-separated indices of MAGI_RUNS (default all)")
    parser.add_argument("--no_compile", dest="compile", action="store_false",
                        help="leave out the torch.compile rows")
    parser.add_argument("--magi_warmup", type=int, default=2, help="examples:generate --warmup_forwards")
    parser.add_argument("--torch_warmup", type=int, default=2, help="untimed PyTorch generations (compiles)")
    parser.add_argument("--torch_runs", type=int, default=3, help="timed PyTorch generations (median)")
    parser.add_argument("--logits_tol", type=float, default=0.05,
                        help="first-token logits: max abs diff from fp32 allowed, as a share of max |reference|")
    parser.add_argument("--peak_bandwidth", type=float, default=0, help="bytes/s (default: by the GPU's name)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per process")
    parser.add_argument("--dry_run", action="store_true", help="the tiny model on the CPU (no GPU)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the rows an earlier run of the same command left in --out_dir (their logs, "
                             "summaries and tensors) and run the others: a run cut short by a time limit goes on")
    args = parser.parse_args(argv)
    args.batches = args.batches or ([1, 2] if args.dry_run else [1, 8, 32])
    args.prompts = args.prompts or ([4, 16] if args.dry_run else [16, 1024])
    args.length = args.length or (8 if args.dry_run else 128)
    unknown = set(args.only.split(",")) - {"magi", "pytorch"}
    if unknown:
        parser.error("--only takes magi and/or pytorch, not %s" % ", ".join(sorted(unknown)))
    if "magi" in args.only.split(",") and not os.path.exists(args.generate):
        parser.error("--generate %s does not exist (build it: tools/bazel build --config=cuda --config=opt "
                     "//examples:generate)" % args.generate)
    return args


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    bench = Bench(args)
    bench.run_all()
    device_name = "cpu" if args.dry_run else (bench.device_name or device_name_from_nvidia_smi())
    shape = bench.shape
    meta = {"model": bench.model, "dtype": bench.dtype, "shape": shape, "parameters": parameter_count(shape),
            "weight_bytes": parameter_count(shape) * bench.element_bytes, "device_name": device_name,
            "peak_bytes_per_s": args.peak_bandwidth or hbm_peak_bytes_per_s(device_name),
            "batches": args.batches, "prompts": args.prompts, "length": args.length, "logits_tol": args.logits_tol,
            "generate": args.generate}
    write_results(bench.rows, meta, args.out_dir, args.logits_tol)
    failed = [r["label"] for r in bench.rows if r.get("failed")]
    if failed:
        print("generate_1b: %d run(s) failed: %s" % (len(failed), "; ".join(failed)), flush=True)
    return 1 if failed or not bench.rows else 0


if __name__ == "__main__":
    sys.exit(main())
