"""Magi from Python: torch.compile(model, backend="magi"), then FSDP training with magi.train.

One process (torch.compile only, then magi.train on 1 rank):
    PYTHONPATH=bazel-bin/magi/frontend/python/pkg "$MAGI_TORCH_PYTHON" examples/python/compile_and_train.py
Two ranks on CPU (Gloo), one process per device:
    PYTHONPATH=bazel-bin/magi/frontend/python/pkg "$MAGI_TORCH_PYTHON" -m torch.distributed.run \\
        --standalone --nproc_per_node=2 examples/python/compile_and_train.py --steps 20
(docs/python.md: building the package and where MAGI_TORCH_PYTHON comes from.)
"""

import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

import magi


class TinyLM(nn.Module):
    """A small decoder-only language model: embedding, 2 pre-norm blocks, untied head."""

    def __init__(self, vocab=64, dim=32, heads=4, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True,
                                                               norm_first=True) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1])
        for block in self.blocks:
            x = block(x, src_mask=mask, is_causal=True)
        return self.head(self.norm(x))


def lm_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def batches(rank, steps, batch=4, seq=16, vocab=64):
    """This rank's batches: a counting sequence mod vocab from a random start (learnable)."""
    g = torch.Generator().manual_seed(100 + rank)
    for _ in range(steps):
        start = torch.randint(0, vocab, (batch, 1), generator=g)
        tokens = (start + torch.arange(seq + 1)) % vocab
        yield (tokens[:, :-1],), (tokens[:, 1:],)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--out_dir", default=os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "magi_python_train"),
                        help="summary.json, loss.csv and checkpoint/ go here")
    args = parser.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    torch.manual_seed(0)
    model = TinyLM()

    # 1. torch.compile: Dynamo's graphs run on Magi (forward and backward); compare with eager.
    tokens, targets = next(batches(rank, 1))[0][0], next(batches(rank, 1))[1][0]
    compiled = torch.compile(model, backend="magi", dynamic=False, options={"partitions": ["elementwise"]})
    loss = lm_loss(compiled(tokens), targets)
    loss.backward()
    compiled_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    eager = lm_loss(model(tokens), targets)
    eager.backward()
    same = loss.item() == eager.item() and all(torch.equal(a, p.grad) for a, p in zip(compiled_grads, model.parameters()))
    model.zero_grad()
    if rank == 0:
        print("torch.compile(backend='magi'): loss %.6f, eager %.6f, gradients %s" % (
            loss.item(), eager.item(), "bitwise equal" if same else "DIFFER"))

    # 2. magi.train: the joint graph under Magi's FSDP with AdamW, over every process torchrun started.
    result = magi.train(model, lm_loss, batches(rank, args.steps), lr=3e-3, shard_groups=["blocks.0", "blocks.1", ""],
                        checkpoint_dir=os.path.join(args.out_dir, "checkpoint"), out_dir=args.out_dir)
    if rank == 0:
        print("summary: %s/summary.json (plan %s)" % (args.out_dir, result.plan_hash))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
