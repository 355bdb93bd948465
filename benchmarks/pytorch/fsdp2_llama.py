#!/usr/bin/env python3
"""Trains the Llama twin of Magi's C++ model (llama.py) with PyTorch FSDP2 and reports speed, memory and
losses: the PyTorch columns of issue #12's benchmark and its numerics check against Magi.

    python3 fsdp2_llama.py --mode=eager --model=1b --out=/tmp/fsdp2_eager.json               # one GPU
    python3 fsdp2_llama.py --mode=compile --model=1b --out=/tmp/fsdp2_compile.json
    torchrun --nproc_per_node=8 fsdp2_llama.py --mode=eager --model=1b --batch_size=32 --out=...
    python3 fsdp2_llama.py --model=tiny --device=cpu --steps=5 --warmup=1 --out=/tmp/t.json   # CPU, gloo
    python3 fsdp2_llama.py --model=1b --weights=/tmp/magi_init --batches=/tmp/magi_batches --steps=20 --warmup=0 ...

One mode per run:
  eager    fully_shard(block, mesh, mp_policy) for every decoder block, then fully_shard(root);
           MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32) over fp32 master parameters;
           torch.optim.AdamW(lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01), fused on CUDA, foreach on CPU.
  compile  the same, with every block wrapped by torch.compile(block, fullgraph=True) before fully_shard (as
           torchtitan does: FSDP's hooks stay outside the compiled region, one graph per block).

One step: forward, loss = mean cross entropy of the fp32-cast logits (as Magi's FSDP training test does:
LanguageModelLoss(model->forward(tokens).to(kFloat), targets)), backward (FSDP2 reduce-scatters the
gradients, averaged over ranks), optimizer.step(), zero_grad(set_to_none=True).

Inputs: --weights=PREFIX loads the initial fp32 parameters from a magi-tensors-v1 file (names and shapes
must match one to one), else they are drawn with torch.manual_seed(--seed) in the C++ model's order.
--batches=PREFIX reads step.<s>.tokens / step.<s>.targets ([global_batch, seq] int64, s = 0 .. warmup +
steps - 1), else every step gets its own seeded uniform random tokens. Rank r trains on rows
[r*B/world, (r+1)*B/world) of each global batch.

Timing: the device is synchronized before and after each step and the host clock read around it; the
report gives the median over the timed steps (after --warmup untimed ones) of the slowest rank's time;
tokens/s = global tokens per step / median step time; peak memory is torch.cuda.max_memory_allocated
since the first step (max over ranks; null on CPU); losses are every step's (warmup included) loss
averaged over ranks (one all-reduce after the last step, so none runs inside a timed step).

Writes --out (JSON, atomically, by rank 0) and prints a one-line summary. NCCL_NVLS_ENABLE is forced to 0
(no NVLink multicast). Runs as plain `python3` (world 1: the process group is made here from defaults) or
under torchrun. Exit status: 1 on bad input or a failed run (the message says why), 2 on bad usage.
"""

import argparse
import inspect
import json
import math
import os
import platform
import socket
import statistics
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import gpu_energy  # noqa: E402
import llama  # noqa: E402
import tensor_file  # noqa: E402

_DEFAULT_SHAPE = {"tiny": (8, 64), "1b": (4, 2048)}  # (global batch, seq_len) when neither flag nor file gives it
_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


class BenchError(Exception):
    """Bad input or a failed run; the message says what and where."""


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["eager", "compile"], default="eager")
    p.add_argument("--model", choices=["tiny", "1b"], default="tiny")
    p.add_argument("--weights", default="", help="magi-tensors-v1 PREFIX with the initial fp32 parameters")
    p.add_argument("--batches", default="", help="magi-tensors-v1 PREFIX with step.<s>.tokens / step.<s>.targets")
    p.add_argument("--batch_size", type=int, default=None, help="global batch (rows); default tiny 8, 1b 4")
    p.add_argument("--seq_len", type=int, default=None, help="default tiny 64, 1b 2048")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps before them")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0, help="init (without --weights) and random batches")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--param_dtype", choices=sorted(_DTYPES), default="bfloat16",
                   help="FSDP2 compute/gather dtype (reduce is always float32)")
    p.add_argument("--save_init", default="", help="write the initial parameters to this magi-tensors-v1 PREFIX")
    p.add_argument("--save_final", default="", help="write the trained full parameters to this PREFIX")
    p.add_argument("--out", default="", help="JSON report")
    args = p.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        p.error("--steps must be >= 1 and --warmup >= 0")
    if args.lr <= 0:
        p.error("--lr must be positive")
    for flag in ("batch_size", "seq_len"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            p.error("--%s must be >= 1" % flag)
    return args


def import_fsdp2():
    """(fully_shard, MixedPrecisionPolicy) from wherever this PyTorch keeps FSDP2."""
    errors = []
    try:  # PyTorch >= 2.6
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        return fully_shard, MixedPrecisionPolicy
    except Exception as e:  # ImportError, or (Debian's 1.13 on Python 3.11) a failure inside the package
        errors.append("torch.distributed.fsdp: %s: %s" % (type(e).__name__, e))
    try:  # PyTorch 2.4 / 2.5
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
        return fully_shard, MixedPrecisionPolicy
    except Exception as e:
        errors.append("torch.distributed._composable.fsdp: %s: %s" % (type(e).__name__, e))
    raise BenchError("PyTorch %s at %s has no FSDP2 (fully_shard; PyTorch >= 2.4 has it): %s" %
                     (torch.__version__, os.path.dirname(torch.__file__), "; ".join(errors)))


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed(device_type):
    """Initializes the default process group (NCCL on CUDA, gloo on CPU); returns (rank, world, device)."""
    previous = os.environ.get("NCCL_NVLS_ENABLE")
    if previous not in (None, "0"):
        print("fsdp2_llama: NCCL_NVLS_ENABLE=%s overridden to 0 (NVLink multicast stays off)" % previous,
              file=sys.stderr)
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    if "RANK" not in os.environ:  # plain `python3`: a world of one
        os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"})
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device_type == "cuda":
        if not torch.cuda.is_available():
            raise BenchError("--device=cuda but torch.cuda.is_available() is False (use --device=cpu)")
        if local_rank >= torch.cuda.device_count():
            raise BenchError("rank %d: LOCAL_RANK %d but only %d CUDA devices" % (rank, local_rank,
                                                                                 torch.cuda.device_count()))
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        # Binding the device (PyTorch >= 2.3) makes NCCL's communicator eagerly, for this GPU only.
        bind = {"device_id": device} if "device_id" in inspect.signature(dist.init_process_group).parameters else {}
        dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=world, **bind)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    return rank, world, device


def make_batches(args, config, rank, world, total_steps, device):
    """[(tokens, targets)] of this rank's rows for steps 0 .. total_steps-1, on `device`; and (B, S)."""
    if args.batches:
        json_path, _ = tensor_file.split_prefix(args.batches)
        entries = {e["name"]: e for e in tensor_file.read_index(args.batches)}
        steps_in_file = 0
        while "step.%d.tokens" % steps_in_file in entries:
            steps_in_file += 1
        if steps_in_file < total_steps:
            raise BenchError("%s: holds step.0 .. step.%d, but --warmup %d + --steps %d need %d steps" %
                             (json_path, steps_in_file - 1, args.warmup, args.steps, total_steps))
        names = [n for s in range(total_steps) for n in ("step.%d.tokens" % s, "step.%d.targets" % s)]
        for name in names:
            if name not in entries:
                raise BenchError("%s: no tensor '%s'" % (json_path, name))
            entry = entries[name]
            if entry["dtype"] not in ("int64", "int32") or len(entry["shape"]) != 2:
                raise BenchError("%s: tensor '%s' is %s%s; expected int64 [global_batch, seq]" %
                                 (json_path, name, entry["dtype"], entry["shape"]))
            if entry["shape"] != entries["step.0.tokens"]["shape"]:
                raise BenchError("%s: tensor '%s' has shape %s but step.0.tokens has %s" %
                                 (json_path, name, entry["shape"], entries["step.0.tokens"]["shape"]))
        batch, seq = entries["step.0.tokens"]["shape"]
        for flag, value, got in (("batch_size", args.batch_size, batch), ("seq_len", args.seq_len, seq)):
            if value is not None and value != got:
                raise BenchError("--%s=%d but %s holds %d" % (flag, value, json_path, got))
        tensors = tensor_file.read_tensors(args.batches, names=names)
        for name in names:
            t = tensors[name]
            if t.numel() and (int(t.min()) < 0 or int(t.max()) >= config.vocab_size):
                raise BenchError("%s: tensor '%s' holds ids in [%d, %d], outside the vocabulary [0, %d)" %
                                 (json_path, name, int(t.min()), int(t.max()), config.vocab_size))
        pairs = [(tensors["step.%d.tokens" % s].long(), tensors["step.%d.targets" % s].long())
                 for s in range(total_steps)]
    else:
        default_batch, default_seq = _DEFAULT_SHAPE[args.model]
        batch = args.batch_size if args.batch_size is not None else default_batch
        seq = args.seq_len if args.seq_len is not None else default_seq
        generator = torch.Generator().manual_seed(args.seed + 1)
        pairs = []
        for _ in range(total_steps):
            ids = torch.randint(0, config.vocab_size, (batch, seq + 1), generator=generator)
            pairs.append((ids[:, :-1], ids[:, 1:]))
    if seq > config.max_seq_len:
        raise BenchError("sequence length %d exceeds the %s model's max_seq_len %d" % (seq, args.model,
                                                                                     config.max_seq_len))
    if batch % world:
        raise BenchError("global batch %d does not split evenly over %d ranks" % (batch, world))
    rows = batch // world
    local = [(t[rank * rows:(rank + 1) * rows].contiguous().to(device),
              y[rank * rows:(rank + 1) * rows].contiguous().to(device)) for t, y in pairs]
    return local, batch, seq


def build_model(args, config):
    torch.manual_seed(args.seed)
    model = llama.Llama(config)  # fp32 on the CPU; fully_shard moves each rank's shards to the device
    if args.weights:
        llama.load_magi_weights(model, args.weights)
    return model


def shard_model(model, args, mesh, fully_shard, policy):
    if args.mode == "compile":
        for index, block in enumerate(list(model.layers)):
            model.layers.register_module(str(index), torch.compile(block, fullgraph=True))
    for block in model.layers:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)


def _canonical_name(name):
    return name.replace("._orig_mod", "")  # torch.compile's wrapper adds a level to the names


def full_parameters(model):
    """[(name, full fp32 CPU tensor)] of the sharded model, in named_parameters() order (a collective)."""
    out = []
    for name, param in model.named_parameters():
        value = param.detach()
        if hasattr(value, "full_tensor"):
            value = value.full_tensor()
        out.append((_canonical_name(name), value.float().cpu()))
    return out


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_step(model, optimizer, tokens, targets):
    logits = model(tokens)
    loss = llama.language_model_loss(logits.float(), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def _atomic_write_text(path, text):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def run(args):
    fully_shard, MixedPrecisionPolicy = import_fsdp2()
    from torch.distributed.device_mesh import init_device_mesh

    config = llama.LlamaConfig.preset(args.model)
    rank, world, device = init_distributed(args.device)
    total_steps = args.warmup + args.steps
    batches, global_batch, seq = make_batches(args, config, rank, world, total_steps, device)

    model = build_model(args, config)
    if args.save_init and rank == 0:
        llama.save_magi_weights(model, args.save_init)
    mesh = init_device_mesh(device.type, (world,), mesh_dim_names=("dp",))
    policy = MixedPrecisionPolicy(param_dtype=_DTYPES[args.param_dtype], reduce_dtype=torch.float32)
    shard_model(model, args, mesh, fully_shard, policy)
    optimizer_kind = {"fused": True} if device.type == "cuda" else {"foreach": True}
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-8,
                                  weight_decay=0.01, **optimizer_kind)

    dist.barrier()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    # Rank 0's GPU energy over the timed steps (NVML, read at the window's two ends only; None
    # where it cannot be read).
    energy = None
    if device.type == "cuda" and rank == 0:
        props = torch.cuda.get_device_properties(device)
        pci = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
        if None in pci:
            print("gpu_energy: GPU energy not measured: this PyTorch gives no PCI bus id", file=sys.stderr)
        else:
            energy = gpu_energy.WindowEnergy.open("%04x:%02x:%02x.0" % tuple(pci))
    losses, times_ms = [], []
    for step, (tokens, targets) in enumerate(batches):
        _sync(device)
        if energy is not None and step == args.warmup:
            energy.start()
        start = time.perf_counter()
        losses.append(train_step(model, optimizer, tokens, targets))
        _sync(device)
        times_ms.append((time.perf_counter() - start) * 1e3)
    if energy is not None:
        energy.end()

    # Cross-rank reductions, after the timed loop: mean loss per step, slowest rank's time, max peak.
    loss_sum = torch.stack(losses).float()
    dist.all_reduce(loss_sum, op=dist.ReduceOp.SUM)
    mean_losses = (loss_sum / world).cpu().tolist()
    slowest = torch.tensor(times_ms, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    times_ms = slowest.cpu().tolist()
    peak_gib = None
    if device.type == "cuda":
        peak = torch.tensor([float(torch.cuda.max_memory_allocated(device))], dtype=torch.float64, device=device)
        dist.all_reduce(peak, op=dist.ReduceOp.MAX)
        peak_gib = peak.item() / 2**30
    bad = [i for i, v in enumerate(mean_losses) if not math.isfinite(v)]
    if bad:
        raise BenchError("loss is not finite at step(s) %s: %s" % (bad, [mean_losses[i] for i in bad]))
    if args.save_final:
        final = full_parameters(model)  # every rank takes part in the gathers
        if rank == 0:
            tensor_file.write_tensors(args.save_final, final)

    timed = times_ms[args.warmup:]
    median_ms = statistics.median(timed)
    tokens_per_step = global_batch * seq
    flops_per_step = config.flops_per_token(seq) * tokens_per_step
    report = {
        "mode": args.mode,
        "model": args.model,
        "world_size": world,
        "ms_per_step_median": median_ms,
        "ms_per_step_all": timed,
        "tokens_per_s": tokens_per_step / (median_ms / 1e3),
        "peak_gib": peak_gib,
        **(energy.summary(len(batches) - args.warmup) if energy is not None else gpu_energy.NOT_MEASURED),
        "losses": mean_losses,
        "torch_version": torch.__version__,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else
                       "cpu (%s, %d threads)" % (platform.machine(), torch.get_num_threads()),
        "warmup_ms": times_ms[:args.warmup],
        "warmup": args.warmup,
        "steps": args.steps,
        "global_batch": global_batch,
        "seq_len": seq,
        "tokens_per_step": tokens_per_step,
        "num_parameters": config.num_parameters(),
        "flops_per_step": flops_per_step,
        "tflops_per_s": flops_per_step / (median_ms / 1e3) / 1e12,
        "param_dtype": args.param_dtype,
        "reduce_dtype": "float32",
        "optimizer": "AdamW(lr=%g, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, %s)" % (
            args.lr, "fused" if device.type == "cuda" else "foreach"),
        "lr": args.lr,
        "seed": args.seed,
        "weights": args.weights or None,
        "batches": args.batches or None,
    }
    if args.mode == "compile":  # one graph reused by every block is expected; more means recompiles
        from torch._dynamo.utils import counters
        report["dynamo_stats"] = dict(counters["stats"])
        report["dynamo_graph_breaks"] = sum(counters["graph_break"].values())
    if rank == 0:
        if args.out:
            _atomic_write_text(args.out, json.dumps(report, indent=1) + "\n")
        print("fsdp2 %s model=%s world=%d: %.1f ms/step (median of %d), %.0f tokens/s, %.1f TFLOP/s, peak %s, "
              "loss %.4f -> %.4f (%s, torch %s)" % (
                  args.mode, args.model, world, median_ms, len(timed), report["tokens_per_s"],
                  report["tflops_per_s"], "%.2f GiB" % peak_gib if peak_gib is not None else "n/a",
                  mean_losses[0], mean_losses[-1], report["device_name"], torch.__version__), flush=True)
    return report


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(args)
    except (BenchError, tensor_file.TensorFileError, ValueError) as e:
        print("fsdp2_llama: error: %s" % e, file=sys.stderr, flush=True)
        return 1
    finally:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
