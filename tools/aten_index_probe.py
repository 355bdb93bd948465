#!/usr/bin/env python3
"""Which ATen CPU kernels read or write through index tensors without checking them.

    /usr/bin/python3 tools/aten_index_probe.py [--json OUT.json] [--only SUBSTRING,...]

For every ATen op that takes an index tensor (embedding and embedding bag and their
backwards, index_*/scatter/gather/take/put, pooling backwards with indices, losses with
class targets, CTC, packed sequences, segment_reduce), calls the op on small CPU tensors
with one index value out of its valid range (just past the top, far past it, just below
the bottom), and for the ops whose index tensors must agree in size with another argument,
with one of them too short; each call runs in a forked child, so a crash is a result too.
A case is
  checked:    the kernel raised (--json keeps the message);
  UNCHECKED:  it returned, having read or written memory it does not own, or silently
              dropped the index ("varies": two identical calls gave different results);
  unused:     it returned the same result as with valid values (the kernel does not read
              this argument in this mode);
  crash:      the child died on a signal.
Magi validates exactly the arguments found UNCHECKED or crashing before calling these
ops (magi/backend/common/index_checks.cc); docs/fx.md has the table this prints.
"""

import argparse
import json
import os
import signal
import sys

import torch

aten = torch.ops.aten
F32 = torch.float32
I64 = torch.int64
FAR = 1 << 40


def _t(values, dtype=I64):
    return torch.tensor(values, dtype=dtype)


def _rand(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


def _set_last(t, value):
    t = t.clone()
    t.view(-1)[-1] = value
    return t


class Case:
    """A value case: fn(v) calls the op with one index value set to v, valid for lo <= v < hi.
    A size case (lo is None): fn(True) calls it with one argument too short (a copy, so a read
    past its end finds other memory), fn(False) with the sizes the op's forward made."""

    def __init__(self, fn, lo=None, hi=None, bad=None):
        self.fn, self.lo, self.hi = fn, lo, hi
        self.bad = bad  # the out-of-range values to try; default: hi, 2^40, lo - 1


def _bag(mode, n=8, per_sample_weights=None):
    """_embedding_bag of 10x3 weights over indices [1,2,4,5,4,3,2,9][:n], offsets [0, 4]."""
    weight = _rand(10, 3)
    indices = _t([1, 2, 4, 5, 4, 3, 2, 9][:n])
    offsets = _t([0, 4])
    return weight, indices, offsets, aten._embedding_bag(weight, indices, offsets, False, mode, False,
                                                         per_sample_weights)


def _pool(kind, dims):
    """grad_output, self and indices of max pooling with indices over `dims` spatial dims."""
    x = _rand(1, 2, *([4] * dims))
    if kind == "max":
        out, ind = (aten.max_pool2d_with_indices if dims == 2 else aten.max_pool3d_with_indices)(x, [2] * dims)
    else:
        out, ind = (aten.adaptive_max_pool2d if dims == 2 else aten.adaptive_max_pool3d)(x, [2] * dims)
    return torch.ones_like(out), x, ind


def cases():
    c = {}
    w = _rand(10, 3)
    g = _rand(2, 3)
    c["embedding (indices)"] = Case(lambda b: aten.embedding(w, _t([1, b])), 0, 10)
    c["embedding_dense_backward (indices)"] = Case(
        lambda b: aten.embedding_dense_backward(g, _t([1, b]), 10, -1, False), 0, 10)
    c["embedding_dense_backward scale_grad_by_freq (indices)"] = Case(
        lambda b: aten.embedding_dense_backward(g, _t([1, b]), 10, -1, True), 0, 10)
    c["embedding_dense_backward (grad_output short)"] = Case(
        lambda short: aten.embedding_dense_backward(g[:1].clone() if short else g, _t([1, 2]), 10, -1, False))
    c["embedding_renorm_ (indices)"] = Case(lambda b: aten.embedding_renorm_(w.clone(), _t([1, b]), 1.0, 2.0), 0, 10)

    modes = ((0, "sum"), (1, "mean"), (2, "max"))
    for op_name in ("_embedding_bag", "_embedding_bag_forward_only"):
        op = getattr(aten, op_name)
        for mode, mode_name in modes:
            c["%s %s (indices)" % (op_name, mode_name)] = Case(
                lambda b, m=mode, op=op: op(w, _t([1, 2, 3, b]), _t([0, 2]), False, m), 0, 10)
            # offsets[i] == len(indices) is an empty last bag: valid.
            c["%s %s (offsets)" % (op_name, mode_name)] = Case(
                lambda b, m=mode, op=op: op(w, _t([1, 2, 3, 4]), _t([0, b]), False, m), 0, 5)
            c["%s %s (offsets decreasing)" % (op_name, mode_name)] = Case(
                lambda b, m=mode, op=op: op(w, _t([1, 2, 3, 4]), _t([0, 3, b]), False, m), 3, 5, bad=[1])
            c["%s %s include_last_offset (offsets)" % (op_name, mode_name)] = Case(
                lambda b, m=mode, op=op: op(w, _t([1, 2, 3, 4]), _t([0, 2, b]), False, m, False, None, True), 2, 5)
    c["_embedding_bag sum per_sample_weights (offsets)"] = Case(
        lambda b: aten._embedding_bag(w, _t([1, 2, 3, 4]), _t([0, b]), False, 0, False, torch.ones(4)), 0, 5)

    def bag_backward(dense, mode, which, b=None):
        _, indices, offsets, (out, offset2bag, bag_size, max_indices) = _bag(mode)
        grad = torch.ones_like(out)
        psw = None
        if which == "offset2bag":
            offset2bag = _set_last(offset2bag, b)
        elif which == "indices":
            indices = _set_last(indices, b)
        elif which == "maximum_indices":
            max_indices = _set_last(max_indices, b)
        elif which == "offsets":
            offsets = _set_last(offsets, b)
        elif which == "offset2bag short":
            offset2bag = offset2bag[:2].clone() if offset2bag.numel() else _t([0, 0])
        elif which == "bag_size short":
            bag_size = bag_size[:1].clone()
        elif which == "grad short":
            grad = grad[:1].clone()
        elif which == "maximum_indices short":
            max_indices = max_indices[:1].clone()
        elif which == "offsets long":
            offsets = _t([0, 4, 6])
        elif which == "per_sample_weights short":
            psw = torch.ones(2)
        if dense:
            return aten._embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, max_indices, 10, False,
                                                      mode, psw)
        return aten._embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, max_indices, 10, False,
                                            mode, False, psw)

    for dense, op in ((True, "_embedding_bag_dense_backward"), (False, "_embedding_bag_backward")):
        for mode, mode_name in modes:
            c["%s %s (offset2bag)" % (op, mode_name)] = Case(
                lambda b, m=mode, d=dense: bag_backward(d, m, "offset2bag", b), 0, 2)
            c["%s %s (indices)" % (op, mode_name)] = Case(
                lambda b, m=mode, d=dense: bag_backward(d, m, "indices", b), 0, 10)
            for short in ("offset2bag short", "bag_size short", "grad short", "maximum_indices short",
                          "per_sample_weights short"):
                if short == "per_sample_weights short" and mode != 0:
                    continue
                c["%s %s (%s)" % (op, mode_name, short)] = Case(
                    lambda on, m=mode, d=dense, s=short: bag_backward(d, m, s if on else None))
        c["%s max (maximum_indices)" % op] = Case(lambda b, d=dense: bag_backward(d, 2, "maximum_indices", b), 0, 10)
    for mode, mode_name in modes:
        c["_embedding_bag_backward %s (offsets)" % mode_name] = Case(
            lambda b, m=mode: bag_backward(False, m, "offsets", b), 4, 9)
        c["_embedding_bag_backward %s (offsets long)" % mode_name] = Case(
            lambda on, m=mode: bag_backward(False, m, "offsets long" if on else None))

    def per_sample_backward(which, b=None):
        weight, indices, offsets, (out, offset2bag, _, _) = _bag(0, per_sample_weights=torch.ones(8))
        grad = torch.ones_like(out)
        if which == "offset2bag":
            offset2bag = _set_last(offset2bag, b)
        elif which == "indices":
            indices = _set_last(indices, b)
        elif which == "offset2bag short":
            offset2bag = offset2bag[:2].clone()
        elif which == "grad short":
            grad = grad[:1].clone()
        return aten._embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, 0)

    op = "_embedding_bag_per_sample_weights_backward"
    c["%s (offset2bag)" % op] = Case(lambda b: per_sample_backward("offset2bag", b), 0, 2)
    c["%s (indices)" % op] = Case(lambda b: per_sample_backward("indices", b), 0, 10)
    c["%s (offset2bag short)" % op] = Case(lambda on: per_sample_backward("offset2bag short" if on else None))
    c["%s (grad short)" % op] = Case(lambda on: per_sample_backward("grad short" if on else None))

    x = _rand(5, 3)
    src = _rand(2, 3)
    c["index_select (index)"] = Case(lambda b: aten.index_select(x, 0, _t([0, b])), -5, 5)
    c["index_add (index)"] = Case(lambda b: aten.index_add(x, 0, _t([0, b]), src), 0, 5)
    c["index_copy (index)"] = Case(lambda b: aten.index_copy(x, 0, _t([0, b]), src), 0, 5)
    c["index_fill (index)"] = Case(lambda b: aten.index_fill(x, 0, _t([0, b]), 1.0), -5, 5)
    if hasattr(aten, "index_reduce"):
        c["index_reduce prod (index)"] = Case(lambda b: aten.index_reduce(x, 0, _t([0, b]), src, "prod"), 0, 5)
    c["index.Tensor (indices)"] = Case(lambda b: aten.index(x, [_t([0, b])]), -5, 5)
    c["index_put (indices)"] = Case(lambda b: aten.index_put(x, [_t([0, b])], src, False), -5, 5)
    c["index_put accumulate (indices)"] = Case(lambda b: aten.index_put(x, [_t([0, b])], src, True), -5, 5)
    c["_index_put_impl_ accumulate unsafe (indices)"] = Case(
        lambda b: aten._index_put_impl_(x.clone(), [_t([0, b])], src, True, True), -5, 5)
    c["_index_put_impl_ unsafe (indices)"] = Case(
        lambda b: aten._index_put_impl_(x.clone(), [_t([0, b])], src, False, True), -5, 5)
    if hasattr(aten, "_unsafe_index"):
        c["_unsafe_index (indices)"] = Case(lambda b: aten._unsafe_index(x, [_t([0, b])]), -5, 5)
    if hasattr(aten, "_unsafe_index_put"):
        c["_unsafe_index_put accumulate (indices)"] = Case(
            lambda b: aten._unsafe_index_put(x, [_t([0, b])], src, True), -5, 5)
    c["take (index)"] = Case(lambda b: aten.take(x, _t([0, b])), -15, 15)
    c["put (index)"] = Case(lambda b: aten.put(x, _t([0, b]), _t([1.0, 2.0], F32)), -15, 15)
    c["put accumulate (index)"] = Case(lambda b: aten.put(x, _t([0, b]), _t([1.0, 2.0], F32), True), -15, 15)
    idx = _t([[0, 1, 2], [4, 3, 0]])
    c["gather (index)"] = Case(lambda b: aten.gather(x, 0, _set_last(idx, b)), 0, 5)
    c["scatter.src (index)"] = Case(lambda b: aten.scatter(x, 0, _set_last(idx, b), src), 0, 5)
    c["scatter.value (index)"] = Case(lambda b: aten.scatter(x, 0, _set_last(idx, b), 1.0), 0, 5)
    c["scatter.reduce add (index)"] = Case(lambda b: aten.scatter(x, 0, _set_last(idx, b), src, reduce="add"), 0, 5)
    c["scatter_add (index)"] = Case(lambda b: aten.scatter_add(x, 0, _set_last(idx, b), src), 0, 5)
    c["scatter_reduce.two amax (index)"] = Case(
        lambda b: aten.scatter_reduce(x, 0, _set_last(idx, b), src, "amax"), 0, 5)

    logits = _rand(3, 5)
    c["nll_loss_forward (target)"] = Case(
        lambda b: aten.nll_loss_forward(logits, _t([0, 1, b]), None, 1, -100), 0, 5)
    c["nll_loss_backward (target)"] = Case(
        lambda b: aten.nll_loss_backward(torch.tensor(1.0), logits, _t([0, 1, b]), None, 1, -100,
                                         torch.tensor(3.0)), 0, 5)
    logits2d = _rand(1, 5, 2, 2)
    c["nll_loss2d_forward (target)"] = Case(
        lambda b: aten.nll_loss2d_forward(logits2d, _t([[[0, 1], [2, b]]]), None, 1, -100), 0, 5)
    c["nll_loss2d_backward (target)"] = Case(
        lambda b: aten.nll_loss2d_backward(torch.tensor(1.0), logits2d, _t([[[0, 1], [2, b]]]), None, 1, -100,
                                           torch.tensor(4.0)), 0, 5)
    c["multi_margin_loss (target)"] = Case(lambda b: aten.multi_margin_loss(logits, _t([0, 1, b])), 0, 5)
    c["multi_margin_loss_backward (target)"] = Case(
        lambda b: aten.multi_margin_loss_backward(torch.tensor(1.0), logits, _t([0, 1, b]), 1, 1.0, None, 1), 0, 5)
    # A negative target ends a sample's label list: only the top is out of range.
    c["multilabel_margin_loss_forward (target)"] = Case(
        lambda b: aten.multilabel_margin_loss_forward(logits, _t([[0, b, -1, 0, 0]] * 3), 1), 0, 5, bad=[5, FAR])

    for kind, dims in (("max", 2), ("max", 3), ("adaptive", 2), ("adaptive", 3)):
        grad, xin, ind = _pool(kind, dims)
        if kind == "max":
            name = "max_pool%dd_with_indices_backward" % dims
            op = getattr(aten, name)
            fn = lambda ind, grad, op=op, xin=xin, dims=dims: op(grad, xin, [2] * dims, [2] * dims, [0] * dims,
                                                                 [1] * dims, False, ind)
        else:
            name = "adaptive_max_pool%dd_backward" % dims
            op = getattr(aten, name)
            fn = lambda ind, grad, op=op, xin=xin: op(grad, xin, ind)
        c["%s (indices)" % name] = Case(lambda b, fn=fn, ind=ind, grad=grad: fn(_set_last(ind, b), grad), 0, 4 ** dims)
        c["%s (indices short)" % name] = Case(lambda on, fn=fn, ind=ind, grad=grad: fn(ind[:, :1].clone() if on else ind, grad))
        c["%s (grad_output short)" % name] = Case(lambda on, fn=fn, ind=ind, grad=grad: fn(ind, grad[:, :1].clone() if on else grad))
    for dims in (2, 3):
        xf = _rand(1, 2, *([4] * dims))
        name = "fractional_max_pool%dd" % dims
        pooled, ind = getattr(aten, name)(xf, [2] * dims, [2] * dims, torch.rand(1, 2, dims))
        op = getattr(aten, name + "_backward")
        c["%s_backward (indices)" % name] = Case(
            lambda b, op=op, pooled=pooled, xf=xf, ind=ind, dims=dims: op(torch.ones_like(pooled), xf, [2] * dims,
                                                                          [2] * dims, _set_last(ind, b)), 0, 4 ** dims)
    pooled, pind = aten.max_pool2d_with_indices(_rand(1, 2, 4, 4), [2, 2])
    c["max_unpool2d (indices)"] = Case(lambda b: aten.max_unpool2d(pooled, _set_last(pind, b), [4, 4]), 0, 16)
    pooled3, pind3 = aten.max_pool3d_with_indices(_rand(1, 2, 4, 4, 4), [2, 2, 2])
    c["max_unpool3d (indices)"] = Case(
        lambda b: aten.max_unpool3d(pooled3, _set_last(pind3, b), [4, 4, 4], [2, 2, 2], [0, 0, 0]), 0, 64)

    log_probs = _rand(6, 1, 4).log_softmax(2)
    c["_ctc_loss (targets)"] = Case(lambda b: aten._ctc_loss(log_probs, _t([[1, 2, b]]), [6], [3], 0, False), 0, 4)
    c["_ctc_loss.Tensor (targets)"] = Case(
        lambda b: aten._ctc_loss(log_probs, _t([[1, 2, b]]), _t([6]), _t([3]), 0, False), 0, 4)
    c["_ctc_loss (target_lengths)"] = Case(
        lambda b: aten._ctc_loss(log_probs, _t([[1, 2, 3]]), [6], [b], 0, False), 0, 4, bad=[-1, -FAR])
    c["_ctc_loss (input_lengths)"] = Case(
        lambda b: aten._ctc_loss(log_probs, _t([[1, 2, 3]]), [b], [3], 0, False), 0, 7, bad=[7, -1])

    def ctc_backward(which, b=None):
        targets = _t([[1, 2, 3]])
        nll, alpha = aten._ctc_loss(log_probs, targets, [6], [3], 0, False)
        target_lengths = [3]
        if which == "targets":
            targets = _set_last(targets, b)
        elif which == "target_lengths":
            target_lengths = [b]
        elif which == "log_alpha short":
            alpha = alpha[:, :2].clone()
        elif which == "neg_log_likelihood short":
            nll = nll[:0].clone()
        return aten._ctc_loss_backward(torch.ones_like(nll), log_probs, targets, [6], target_lengths, nll, alpha,
                                       0, False)

    c["_ctc_loss_backward (targets)"] = Case(lambda b: ctc_backward("targets", b), 0, 4)
    c["_ctc_loss_backward (target_lengths)"] = Case(lambda b: ctc_backward("target_lengths", b), 0, 4,
                                                    bad=[-1, 4])
    c["_ctc_loss_backward (log_alpha short)"] = Case(lambda on: ctc_backward("log_alpha short" if on else None))
    c["_ctc_loss_backward (neg_log_likelihood short)"] = Case(lambda on: ctc_backward("neg_log_likelihood short" if on else None))

    data = _rand(6, 2)
    # lengths [2, b]: valid when they sum to data.size(0) = 6, i.e. b == 4.
    c["segment_reduce sum (lengths)"] = Case(
        lambda b: aten.segment_reduce(data, "sum", lengths=_t([2, b])), 4, 5, bad=[5, FAR, -1])
    c["segment_reduce sum unsafe (lengths)"] = Case(
        lambda b: aten.segment_reduce(data, "sum", lengths=_t([2, b]), unsafe=True), 4, 5, bad=[5, FAR, -1])
    reduced = aten.segment_reduce(data, "sum", lengths=_t([2, 4]))
    c["_segment_reduce_backward sum (lengths)"] = Case(
        lambda b: aten._segment_reduce_backward(torch.ones_like(reduced), reduced, data, "sum", lengths=_t([2, b])),
        4, 5,
        bad=[5, FAR, -1])
    c["one_hot (self)"] = Case(lambda b: aten.one_hot(_t([0, b]), 4), 0, 4)
    # batch_sizes [3, b] over 5 rows: valid when b == 2.
    c["_pad_packed_sequence (batch_sizes)"] = Case(
        lambda b: aten._pad_packed_sequence(_rand(5, 2), _t([3, b]), False, 0.0, 2), 2, 3, bad=[3, FAR, -4])
    c["_pack_padded_sequence_backward (batch_sizes)"] = Case(
        lambda b: aten._pack_padded_sequence_backward(_rand(5, 2), [2, 3, 2], _t([3, b]), False), 2, 3,
        bad=[3, FAR, -4])
    c["_pad_packed_sequence (batch_sizes increasing)"] = Case(
        lambda b: aten._pad_packed_sequence(_rand(5, 2), _t([b, 5 - b]), False, 0.0, 2), 3, 5, bad=[2, 1])
    c["_pad_packed_sequence (batch_sizes zero)"] = Case(
        lambda b: aten._pad_packed_sequence(_rand(5, 2), _t([5 - b, b]), False, 0.0, 2), 1, 3, bad=[0])
    c["_pack_padded_sequence_backward (batch_sizes increasing)"] = Case(
        lambda b: aten._pack_padded_sequence_backward(_rand(5, 2), [2, 3, 2], _t([b, 5 - b]), False), 3, 4,
        bad=[2, 1])
    c["_pack_padded_sequence_backward (batch_sizes past batch)"] = Case(
        lambda b: aten._pack_padded_sequence_backward(_rand(5, 2), [2, 3, 2], _t([b, 5 - b]), False), 3, 4,
        bad=[4, 5])
    c["segment_reduce sum unsafe (offsets)"] = Case(
        lambda b: aten.segment_reduce(data, "sum", offsets=_t([0, 2, b]), unsafe=True), 6, 7, bad=[7, FAR, 1])
    c["segment_reduce sum (offsets)"] = Case(
        lambda b: aten.segment_reduce(data, "sum", offsets=_t([0, 2, b])), 6, 7, bad=[7, FAR, 1])
    c["_segment_reduce_backward sum (offsets)"] = Case(
        lambda b: aten._segment_reduce_backward(torch.ones_like(reduced), reduced, data, "sum",
                                                offsets=_t([0, 2, b])), 6, 7, bad=[7, FAR, 1])
    c["_pack_padded_sequence (lengths)"] = Case(
        lambda b: aten._pack_padded_sequence(_rand(2, 3, 2), _t([2, b]), False), 1, 3, bad=[3, FAR, -1])
    return c


def _tensors(r):
    return [t for t in (r if isinstance(r, (tuple, list)) else [r]) if isinstance(t, torch.Tensor)]


def _equal(a, b):
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b))


def _run_child(case, bad, write):
    try:
        if case.lo is None:
            r1, r2 = _tensors(case.fn(True)), _tensors(case.fn(True))
            unused = _equal(r1, _tensors(case.fn(False)))
            verdict = {"result": "unused" if unused else "UNCHECKED", "varies": not _equal(r1, r2)}
        else:
            r1, r2 = _tensors(case.fn(bad)), _tensors(case.fn(bad))
            valid = [_tensors(case.fn(v)) for v in sorted({case.lo, max(case.lo, case.hi - 1)})]
            unused = len(valid) > 1 and _equal(valid[0], valid[1]) and _equal(valid[0], r1)
            verdict = {"result": "unused" if unused else "UNCHECKED", "varies": not _equal(r1, r2)}
    except Exception as e:  # noqa: BLE001 (any LibTorch error counts as a check)
        text = str(e).strip()
        verdict = {"result": "checked", "message": (text.splitlines()[0] if text else type(e).__name__)[:200]}
    os.write(write, json.dumps(verdict).encode())


def probe(case, bad=None):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)  # glibc's "free(): invalid pointer" and ATen's beta warnings
        _junk = [torch.full((64,), 1e30) for _ in range(8)]  # noqa: F841 (heap an unchecked read finds)
        _run_child(case, bad, write)
        os._exit(0)
    os.close(write)
    out = b""
    while True:
        chunk = os.read(read, 65536)
        if not chunk:
            break
        out += chunk
    os.close(read)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return {"result": "crash", "signal": signal.Signals(os.WTERMSIG(status)).name}
    return json.loads(out.decode()) if out else {"result": "crash", "exit": os.WEXITSTATUS(status)}


def _cell(r):
    if r["result"] == "checked":
        return "checked"
    if r["result"] == "unused":
        return "unused"
    if r["result"] == "crash":
        return "**crash** (%s)" % r.get("signal", r.get("exit"))
    return "**UNCHECKED**" + (" (varies)" if r["varies"] else "")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write every result here")
    parser.add_argument("--only", help="comma-separated substrings of case names")
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = {}
    print("torch %s, CPU" % torch.__version__)
    print("| op (argument) | valid | out-of-range values tried: result |")
    print("| --- | --- | --- |")
    unchecked = 0
    for name, case in cases().items():
        if args.only and not any(s in name for s in args.only.split(",")):
            continue
        if case.lo is None:
            r = probe(case)
            results[name] = {"short": r}
            cells = "one argument too short: " + _cell(r)
            valid = "sizes agree"
            bad_found = r["result"] in ("UNCHECKED", "crash")
        else:
            bad_values = case.bad if case.bad is not None else [case.hi, FAR, case.lo - 1]
            rs = [(v, probe(case, v)) for v in bad_values]
            results[name] = {"valid": [case.lo, case.hi], "tried": {str(v): r for v, r in rs}}
            cells = "; ".join("%s: %s" % ("2^40" if v == FAR else "-2^40" if v == -FAR else v, _cell(r))
                              for v, r in rs)
            valid = "[%d, %d)" % (case.lo, case.hi)
            bad_found = any(r["result"] in ("UNCHECKED", "crash") for _, r in rs)
        unchecked += bad_found
        print("| %s | %s | %s |" % (name, valid, cells), flush=True)
    print("%d of %d cases reach memory or drop an index unchecked" % (unchecked, len(results)))
    if args.json:
        # Atomically (temp file + rename): a killed run leaves no half-written table.
        temp = "%s.tmp.%d" % (args.json, os.getpid())
        with open(temp, "w") as f:
            json.dump({"torch": torch.__version__, "cases": results}, f, indent=1)
        os.replace(temp, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
