"""PyTorch's own data-parallel training of an FX model spec: the reference that Magi's FSDP
training of the same model's exported joint graph is checked against.

    /usr/bin/python3 tools/fx_train_reference.py --spec tools.fx_models:llama --worlds 1,2,4 \
        --steps 4 --out /tmp/llama_ref

For each world size W it builds the model exactly as tools/fx_export.py does (the spec's
seeds: the same initial parameters and buffers as the exported joint graph), then runs
--steps steps of what FSDP/DDP compute: every rank r takes its own batch (the shapes of the
spec's example inputs), runs forward and backward on it with its own buffers (BatchNorm
running statistics stay per rank, as without SyncBatchNorm), the gradients are averaged
over the ranks, and torch.optim.AdamW steps the shared parameters.

Batches are generated, never downloaded: step s, rank r uses torch.manual_seed(1000 + 100 * s + r);
floating inputs are standard normal, integer inputs (tokens, class labels) uniform in
[0, K) where K is the size of the model output's last dimension (the vocabulary or the
number of classes of the cross-entropy).

Writes PREFIX.ref.txt (one line per tensor: name dtype offset nbytes ndim sizes...) and
PREFIX.ref.bin (the raw bytes, little-endian, contiguous), both atomically. Names:
  w<W>/step<s>/rank<r>/<input name>   the batch (input.N, target.N as in the joint graph)
  w<W>/step<s>/rank<r>/loss           that rank's loss before the step's update
  w<W>/param/<name>                   every parameter after the last step
  w<W>/rank<r>/buffer/<name>          every buffer of rank r after the last step
"""

import argparse
import copy
import os
import sys

import torch

DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64", torch.int32: "int32"}


def _write_atomically(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _batch(example, classes, seed):
    torch.manual_seed(seed)
    out = []
    for t in example:
        if t.dtype.is_floating_point:
            out.append(torch.randn(t.shape, dtype=t.dtype))
        else:
            out.append(torch.randint(0, classes, t.shape, dtype=t.dtype))
    return out


def train(spec_fn, world, steps, lr, betas, eps, weight_decay, records, batch_fn=None, lr_fn=None):
    """Appends the records named in the file comment for world size `world` to `records`.
    batch_fn(step, rank, example, classes) gives a rank's batch (inputs then targets); by
    default the seeded generated one above (tools/train_vision_check.py passes Magi's).
    lr_fn(step) gives step's learning rate (default: `lr` throughout)."""
    from torch.nn.utils.stateless import functional_call
    spec = spec_fn(mode="joint")
    model = spec.model
    inputs, targets = tuple(spec.inputs), tuple(spec.loss_inputs)
    with torch.no_grad():
        classes = model(*[t.clone() for t in inputs]).shape[-1]
    # make_fx traced the spec from a fresh model; this run warmed up nothing: rebuild it.
    spec = spec_fn(mode="joint")
    model = spec.model
    params = dict(model.named_parameters())
    rank_buffers = [{n: b.clone() for n, b in model.named_buffers()} for _ in range(world)]
    optimizer = torch.optim.AdamW(list(params.values()), lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    names = ["input.%d" % k for k in range(len(inputs))] + ["target.%d" % k for k in range(len(targets))]
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        grads = {n: torch.zeros_like(p) for n, p in params.items()}
        for rank in range(world):
            if batch_fn is None:
                batch = _batch(inputs + targets, classes, 1000 + 100 * step + rank)
            else:
                batch = batch_fn(step, rank, inputs + targets, classes)
            state = dict(params)
            state.update(rank_buffers[rank])  # updated in place by BatchNorm
            out = functional_call(model, state, tuple(batch[:len(inputs)]))
            loss = spec.loss_fn(out, *batch[len(inputs):])
            rank_grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
            for (n, _), g in zip(params.items(), rank_grads):
                if g is not None:
                    grads[n] += g
            prefix = "w%d/step%d/rank%d/" % (world, step, rank)
            for name, t in zip(names, batch):
                records.append((prefix + name, t))
            records.append((prefix + "loss", loss.detach()))
        for n, p in params.items():
            p.grad = grads[n] / world
        if lr_fn is not None:
            for group in optimizer.param_groups:
                group["lr"] = lr_fn(step)
        optimizer.step()
    for n, p in params.items():
        records.append(("w%d/param/%s" % (world, n), p.detach()))
    for rank in range(world):
        for n, b in rank_buffers[rank].items():
            records.append(("w%d/rank%d/buffer/%s" % (world, rank, n), b))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spec", required=True, help="module.path:function returning a ModelSpec (tools/fx_models.py)")
    parser.add_argument("--worlds", default="1,2,4")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight_decay", type=float, default=1e-2)
    parser.add_argument("--out", required=True, help="writes PREFIX.ref.txt and PREFIX.ref.bin")
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import importlib
    module_name, _, function = args.spec.partition(":")
    spec_fn = getattr(importlib.import_module(module_name), function)
    records = []
    for world in [int(w) for w in args.worlds.split(",")]:
        train(spec_fn, world, args.steps, args.lr, (0.9, 0.999), 1e-8, args.weight_decay, records)
    lines, parts, offset = [], [], 0
    for name, t in records:
        t = t.detach().contiguous()
        data = t.numpy().tobytes()
        lines.append(" ".join([name, DTYPES[t.dtype], str(offset), str(len(data)), str(t.dim())] +
                              [str(s) for s in t.shape]))
        parts.append(data)
        offset += len(data)
    _write_atomically(args.out + ".ref.bin", b"".join(parts))
    _write_atomically(args.out + ".ref.txt", ("\n".join(lines) + "\n").encode())
    print("fx_train_reference: %s, worlds %s, %d steps -> %s.ref.txt (%d tensors)" %
          (args.spec, args.worlds, args.steps, args.out, len(records)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
