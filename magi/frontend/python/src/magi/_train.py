"""magi.train: FSDP training of a Python nn.Module with AdamW, on Magi.

The model and its loss are traced once into a joint graph (forward, loss, backward) by
tools/fx_export.py's exporter (bundled as magi._fx_export), which also checks that the traced
graph reproduces PyTorch's own step. Magi's FxTrainer (magi/frontend/fx/fx_trainer.h) then
shards it across the launcher's processes (one per device; torchrun sets RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT), appends AdamW, compiles it, and runs one graph per step over a
Gloo group. At the end the trained parameters (gathered) and this rank's buffers are
written back into `model`.
"""

import json
import os
import tempfile
import time
import types

import torch
from torch.utils.dlpack import from_dlpack, to_dlpack

from . import _C
from . import _fx_export as fx_export


class TrainResult(types.SimpleNamespace):
    """losses: this rank's loss per step taken; summary: the run's summary (a dict, as
    examples:train's summary.json); plan_hash: the compiled plan's fingerprint."""


def _tuple(value):
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


def _split(batch, where):
    if not isinstance(batch, (list, tuple)) or len(batch) != 2:
        raise _C.MagiError("%s: a batch is (inputs, targets): model(*inputs), loss_fn(output, *targets)" % where)
    return _tuple(batch[0]), _tuple(batch[1])


def train(model, loss_fn, batches, *, world=None, steps=None, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
          weight_decay=1e-2, shard_groups=("",), reshard_after_forward=True, backend="interpreter", options=None,
          checkpoint_dir=None, checkpoint_every=0, keep_checkpoints=2, resume=False, out_dir=None, timeout_s=300.0,
          verbose=True):
    """Trains `model` on this rank's `batches` under Magi's FSDP with AdamW.

    batches: iterable of this rank's batches, each (inputs, targets) (a tensor or a tuple of
      tensors each): the loss is loss_fn(model(*inputs), *targets). Every batch has the first
      one's shapes and dtypes (the graph is compiled for them). `steps` caps the steps taken.
    world: the number of processes expected (checked against the launcher's WORLD_SIZE; None:
      whatever it is, 1 without a launcher).
    lr, betas, eps, weight_decay: torch.optim.AdamW's.
    shard_groups: FullyShard-style groups by module path ("layers.0", ...; "" the root).
    backend, options: the primary backend and the compile options (magi.OPTIONS keys other
      than backend and log: partitions, deterministic, memory_budget_bytes, passes, ...).
    checkpoint_dir / checkpoint_every / keep_checkpoints / resume: committed checkpoints
      (FxTrainer::SaveCheckpoint) every N steps and at the end; resume continues from the
      newest one, bit for bit (the batches given must be the ones after it).
    out_dir: rank 0 writes summary.json and loss.csv there.
    Returns a TrainResult.
    """
    options = dict(options or {})
    for key in ("backend", "log"):
        options.pop(key, None)
    env_world = int(os.environ.get("WORLD_SIZE", "1"))
    if world is not None and world != env_world:
        raise _C.MagiError("magi.train(world=%d), but the launcher started %d process(es) (WORLD_SIZE); run it under "
                           "`torchrun --nproc_per_node=%d`" % (world, env_world, world))
    iterator = iter(batches)
    try:
        first = next(iterator)
    except StopIteration:
        raise _C.MagiError("magi.train: no batches") from None
    inputs, targets = _split(first, "batch 0")

    start = time.time()
    export_dir = tempfile.mkdtemp(prefix="magi-train-")
    prefix = os.path.join(export_dir, "joint")
    spec = types.SimpleNamespace(model=model, inputs=inputs, loss_fn=loss_fn, loss_inputs=targets, process_groups={})
    saved_buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    try:
        fx_export.export(spec, "joint", "make_fx", prefix)
    except fx_export.ExportError as error:
        raise _C.MagiError("magi.train: tracing the model's training step failed: %s" % error) from None
    finally:
        # The exporter ran PyTorch's own step to check the graph: undo what it left behind.
        model.zero_grad(set_to_none=True)
        with torch.no_grad():
            for name, b in model.named_buffers():
                b.copy_(saved_buffers[name])
    config = {"shard_groups": list(shard_groups), "reshard_after_forward": reshard_after_forward, "lr": float(lr),
              "betas": (float(betas[0]), float(betas[1])), "eps": float(eps), "weight_decay": float(weight_decay),
              "backend": backend, "optimization": options, "timeout_s": float(timeout_s)}
    trainer = _C.Trainer(prefix + ".fx.json", config)
    compile_seconds = time.time() - start
    rank = trainer.rank
    resumed_from = -1
    if resume:
        if not checkpoint_dir:
            raise _C.MagiError("magi.train(resume=True) needs checkpoint_dir")
        if os.path.exists(os.path.join(checkpoint_dir)):
            trainer.load_checkpoint(checkpoint_dir)
            resumed_from = trainer.steps_taken

    losses, step_seconds = [], []
    batch, index = first, 0
    while batch is not None and (steps is None or len(losses) < steps):
        inputs, targets = _split(batch, "batch %d" % index)
        capsules = [to_dlpack(t.detach().contiguous()) for t in inputs + targets]
        t0 = time.time()
        losses.append(trainer.step(capsules))
        step_seconds.append(time.time() - t0)
        if checkpoint_dir and checkpoint_every > 0 and trainer.steps_taken % checkpoint_every == 0:
            trainer.save_checkpoint(checkpoint_dir, keep_checkpoints)
        index += 1
        batch = next(iterator, None)
    if checkpoint_dir and not (checkpoint_every > 0 and losses and trainer.steps_taken % checkpoint_every == 0):
        trainer.save_checkpoint(checkpoint_dir, keep_checkpoints)

    parameters = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    with torch.no_grad():
        for name, capsule in trainer.gather_parameters():
            parameters[name].copy_(from_dlpack(capsule).reshape(parameters[name].shape))
        for name, capsule in trainer.buffers():
            if name in buffers:
                buffers[name].copy_(from_dlpack(capsule))

    timed = step_seconds[1:] or step_seconds  # the first step includes one-time work
    summary = {"initial_loss": losses[0] if losses else None, "final_loss": losses[-1] if losses else None,
               "steps": len(losses), "world_size": trainer.world_size, "step_seconds": sum(timed) / max(1, len(timed)),
               "compile_seconds": round(compile_seconds, 3), "pipeline": trainer.applied_pipeline, "backend": backend,
               "partitions": list(options.get("partitions", [])), "deterministic": bool(options.get("deterministic")),
               "plan_hash": trainer.plan_hash, "resumed_from_step": resumed_from, "losses": losses}
    if rank == 0 and out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
        with open(os.path.join(out_dir, "loss.csv"), "w") as f:
            f.write("step,loss\n" + "".join("%d,%.6f\n" % (k, loss) for k, loss in enumerate(losses)))
    if rank == 0 and verbose and losses:
        print("magi.train: loss %.4f -> %.4f in %d steps on %d rank(s) (%.3f s/step, compile %.1f s, plan %s)" % (
            losses[0], losses[-1], len(losses), trainer.world_size, summary["step_seconds"], compile_seconds,
            trainer.plan_hash), flush=True)
    return TrainResult(losses=losses, summary=summary, plan_hash=trainer.plan_hash)
