#!/usr/bin/env python3
"""Exports a PyTorch model's ATen-level FX graph for Magi's FX importer (//magi/frontend/fx).

    /usr/bin/python3 tools/fx_export.py --spec tools.fx_models:resnet18 --mode forward --out /tmp/resnet18
    /usr/bin/python3 tools/fx_export.py --spec my_pkg.my_mod:make --mode joint --out /tmp/mine

writes OUT.fx.json (an FxExport message of magi/frontend/fx/fx_graph.proto, as protobuf
JSON) and OUT.tensors (the raw bytes of every graph input, and of PyTorch's own eager
outputs as "expected:<name>"), each atomically (temp file + rename).

A spec is "module.path:function"; the function returns a ModelSpec (see tools/fx_models.py):
the nn.Module, example inputs, and for joint graphs a loss function and its extra inputs.

  --mode forward  the inference graph: parameters and buffers are inputs, outputs are the model's.
  --mode joint    forward + loss + backward: outputs are "loss" and "<param>.grad" for every
                  parameter (built with functional_call + torch.autograd.grad, traced by make_fx);
                  BatchNorm running statistics updated in training come back as "<buffer>.updated".
  --tracer make_fx (any PyTorch from 1.13 on) or export (torch.export, PyTorch 2.x; forward only).

Several exports in one process (what Bazel's genrules do: importing PyTorch costs ~3 s of CPU per
process, more than most small exports themselves):

    /usr/bin/python3 tools/fx_export.py --export tools.fx_models:lstm forward /tmp/lstm_forward \
        --export tools.fx_models:lstm joint /tmp/lstm_joint

Each --export SPEC MODE OUT is exported as a separate command would (the specs seed their own
models and inputs), with the --tracer and --allow_none_grads given; the first that fails stops the
run (exit 1, naming it).

Works with PyTorch 1.13 (Debian's python3-torch) and 2.x.
"""

import argparse
import importlib
import json
import math
import operator
import os
import sys

import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx

try:  # PyTorch 2.x
    from torch.func import functional_call
except ImportError:  # 1.13
    from torch.nn.utils.stateless import functional_call


class ExportError(Exception):
    pass


def _target_name(target):
    if target is operator.getitem:
        return "getitem"
    schema = getattr(target, "_schema", None)
    if schema is None:
        raise ExportError("unsupported call target %r (only ATen/c10d operator overloads and getitem)" % (target,))
    return schema.name + ("." + schema.overload_name if schema.overload_name else "")


class _Ref:
    """A reference to an exported node by its exported name."""

    def __init__(self, name):
        self.name = name


def _encode(value, rename, where):
    if isinstance(value, _Ref):
        return {"node": value.name}
    if value is None:
        return {"none": True}
    if isinstance(value, bool):
        return {"b": value}
    if isinstance(value, int):
        return {"i": value}
    if isinstance(value, float):
        if math.isinf(value):
            return {"special_float": "inf" if value > 0 else "-inf"}
        if math.isnan(value):
            return {"special_float": "nan"}
        return {"f": value}
    if isinstance(value, str):
        return {"s": value}
    if isinstance(value, torch.fx.Node):
        return {"node": rename[value.name]}
    if isinstance(value, (list, tuple)):
        return {"list": {"items": [_encode(v, rename, where) for v in value]}}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).replace("torch.", "")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.layout):
        return {"layout": str(value).replace("torch.", "")}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value).replace("torch.", "")}
    raise ExportError("%s: cannot encode argument %r of type %s" % (where, value, type(value).__name__))


def _extent(tensor):
    """Elements of the tensor's storage it reaches, counted from element 0."""
    if tensor.numel() == 0:
        return 0
    return tensor.storage_offset() + sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride())) + 1


def _clone_layout(tensor):
    """A copy with the same sizes, strides and storage offset (so as_strided and
    non-contiguous kernels see what the original would)."""
    tensor = tensor.detach()
    flat = torch.zeros(max(_extent(tensor), 1), dtype=tensor.dtype, device=tensor.device)
    if tensor.numel():
        flat[:_extent(tensor)].copy_(torch.as_strided(tensor, (_extent(tensor),), (1,), 0))
    return torch.as_strided(flat, tensor.shape, tensor.stride(), tensor.storage_offset())


class _Storages:
    """Small ids for the storages the traced program's tensors live in."""

    def __init__(self):
        self.ids = {}

    def id(self, tensor):
        if tensor._is_zerotensor():
            # Autograd's zero gradients (aten::_efficientzerotensor, e.g. sgn's backward) have no
            # storage at all: PyTorch refuses to hand one to Python. Nothing can alias them.
            return 0
        try:
            storage = tensor.untyped_storage()  # 2.x
        except AttributeError:
            storage = tensor.storage()  # 1.13
        pointer = storage.data_ptr()
        if not pointer:
            return 0  # empty storage: nothing can alias it
        return self.ids.setdefault(pointer, len(self.ids) + 1)


def _tensor_meta(value, storages):
    if isinstance(value, torch.Tensor):
        meta = {"dtype": str(value.dtype).replace("torch.", ""), "shape": list(value.shape),
                "stride": list(value.stride()), "storage_offset": value.storage_offset(),
                "storage": storages.id(value)}
        if value.device.type != "cpu":
            meta["device"] = str(value.device)  # "cuda:0"; absent: the CPU
        return meta
    return {"absent": True}


class _MetaProp(torch.fx.Interpreter):
    """Runs the traced graph and records, per node, each result's dtype, shape, strides,
    storage offset and storage. Every result is kept alive so no storage is reused."""

    def __init__(self, gm):
        super().__init__(gm)
        self.storages, self.keep, self.metas = _Storages(), [], {}

    def run_node(self, node):
        result = super().run_node(node)
        self.keep.append(result)
        if isinstance(result, (list, tuple)):
            self.metas[node.name] = [_tensor_meta(v, self.storages) for v in result]
        elif isinstance(result, torch.Tensor):
            self.metas[node.name] = [_tensor_meta(result, self.storages)]
        else:
            self.metas[node.name] = []
        return result


_INPLACE_VIEW_OPS = ("aten::as_strided_", "aten::transpose_", "aten::t_", "aten::squeeze_", "aten::unsqueeze_",
                     "aten::swapdims_", "aten::swapaxes_", "aten::detach_")


def _written_placeholders(gm, metas, placeholders):
    """Exported names of the placeholders whose storage an op of the graph writes (in-place,
    out=, or batch norm's running statistics, which 1.13's schema does not annotate)."""
    owner = {}
    graph_placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, (name, _) in zip(graph_placeholders, placeholders):
        if metas.get(node.name) and metas[node.name][0]["storage"]:
            owner.setdefault(metas[node.name][0]["storage"], name)
    written = set()
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        schema = getattr(node.target, "_schema", None)
        if schema is None:
            continue
        if schema.name in _INPLACE_VIEW_OPS:
            continue  # they change which memory the tensor shows, not the memory
        indices = [i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
        if schema.name in ("aten::native_batch_norm", "aten::_native_batch_norm_legit") and \
                len(node.args) > 5 and node.args[5] is True:
            indices += [3, 4]
        for i in indices:
            arg = node.args[i] if i < len(node.args) else node.kwargs.get(schema.arguments[i].name)
            if isinstance(arg, torch.fx.Node) and metas.get(arg.name):
                storage = metas[arg.name][0].get("storage")
                if storage in owner:
                    written.add(owner[storage])
    return written


_UNINITIALIZED_OPS = ("aten::empty", "aten::empty_like", "aten::new_empty", "aten::new_empty_strided",
                      "aten::empty_strided")


class UninitializedOutput(ExportError):
    pass


class _Poison(torch.fx.Interpreter):
    """Runs the graph with every uninitialized allocation (empty, new_empty, ...) filled with
    one of two values: results that differ between the fills read memory never written."""

    def __init__(self, gm, second):
        super().__init__(gm)
        self.second = second

    def call_function(self, target, args, kwargs):
        result = super().call_function(target, args, kwargs)
        schema = getattr(target, "_schema", None)
        if schema is not None and schema.name in _UNINITIALIZED_OPS and isinstance(result, torch.Tensor):
            with torch.no_grad():
                if result.dtype == torch.bool:
                    result.fill_(self.second)
                else:
                    result.fill_(77 if self.second else 0)
        return result


class RandomOutput(ExportError):
    pass


def _differing(output_names, first, second):
    def same(a, b):
        if not isinstance(a, torch.Tensor):
            return True
        a, b = a.detach(), b.detach()
        if a.is_complex():
            a, b = torch.view_as_real(a.resolve_conj()), torch.view_as_real(b.resolve_conj())
        return a.shape == b.shape and torch.equal(torch.nan_to_num(a) if a.is_floating_point() else a,
                                                  torch.nan_to_num(b) if b.is_floating_point() else b)
    return [name for name, a, b in zip(output_names, _as_tuple(first), _as_tuple(second)) if not same(a, b)]


_RANDOM_WITHOUT_GENERATOR_ARGUMENT = ("aten::rand_like", "aten::randn_like", "aten::randint_like",
                                      "aten::native_dropout", "aten::dropout", "aten::feature_dropout",
                                      "aten::alpha_dropout", "aten::feature_alpha_dropout")


def _draws_random(schema):
    return schema.name in _RANDOM_WITHOUT_GENERATOR_ARGUMENT or \
        any("Generator" in str(a.type) for a in schema.arguments)


def _check_comparable(gm, make_args, output_names):
    """PyTorch's results can be compared with Magi's only if they depend on the inputs alone:
    not on the random generator (RandomOutput) nor on memory the program never writes
    (UninitializedOutput: empty/new_empty read before being filled). Returns the graph's
    outputs from one run with eager ATen and the arguments of that run (which the graph may
    have written), for _check_reproduces."""
    def run(seed, interpreter):
        torch.manual_seed(seed)
        return interpreter.run(*make_args())
    random_ops = sorted({_target_name(n.target) for n in gm.graph.nodes if n.op == "call_function" and
                         getattr(n.target, "_schema", None) is not None and _draws_random(n.target._schema)})
    if random_ops:
        raise RandomOutput("the graph draws random numbers (%s); export with dropout, stochastic depth and other "
                           "randomness off" % ", ".join(random_ops))
    if any(getattr(n.target, "_schema", None) is not None and n.target._schema.name in _UNINITIALIZED_OPS
           for n in gm.graph.nodes if n.op == "call_function"):
        bad = _differing(output_names, run(0, _Poison(gm, False)), run(0, _Poison(gm, True)))
        if bad:
            raise UninitializedOutput("output(s) %s depend on memory the traced program never initializes (from "
                                      "empty/new_empty): PyTorch's own values there are arbitrary" % ", ".join(bad))
    args = make_args()
    torch.manual_seed(0)
    first = torch.fx.Interpreter(gm).run(*args)
    bad = _differing(output_names, first, run(1, torch.fx.Interpreter(gm)))
    if bad:
        raise RandomOutput("output(s) %s depend on the random generator (the graph draws random numbers; "
                           "export with dropout and other randomness off)" % ", ".join(bad))
    return _as_tuple(first), args


class GraphMismatch(ExportError):
    pass


# The relative difference fx_check (magi/frontend/fx/fx_check.h) allows between Magi's results
# and the recorded ones: the traced graph, run by PyTorch itself, must meet it too.
_REPRODUCE_TOLERANCE = 2e-5


def _difference(got, want):
    """Why `got` (the graph's value) is not `want` (PyTorch's eager value), or None when it is:
    the largest elementwise difference relative to max(1, |want|max), as fx_check measures it
    (NaN matches NaN, infinities match themselves, integers and bools must be equal)."""
    if not isinstance(got, torch.Tensor):
        return "the graph gives %s, not a tensor" % type(got).__name__
    got, want = got.detach().to("cpu"), want.detach().to("cpu")
    if got.dtype != want.dtype or got.shape != want.shape:
        return "the graph gives %s%s, PyTorch %s%s" % (str(got.dtype).replace("torch.", ""), list(got.shape),
                                                       str(want.dtype).replace("torch.", ""), list(want.shape))
    if want.numel() == 0:
        return None
    if not (want.is_floating_point() or want.is_complex()):
        if torch.equal(got, want):
            return None
        at = (got != want).nonzero()[0].tolist()
        return "at %s the graph gives %s, PyTorch %s" % (at, got[tuple(at)].item(), want[tuple(at)].item())

    def as_real(t):
        t = t.resolve_conj().resolve_neg()
        return torch.view_as_real(t.to(torch.complex128)) if t.is_complex() else t.to(torch.float64)
    a, b = as_real(got), as_real(want)
    same = (a == b) | (torch.isnan(a) & torch.isnan(b))
    diff = torch.where(same, torch.zeros_like(a), (a - b).abs().nan_to_num(nan=math.inf))
    scale = max(1.0, torch.where(torch.isfinite(b), b.abs(), torch.zeros_like(b)).max().item())
    worst = diff.max().item() / scale
    if worst <= _REPRODUCE_TOLERANCE:
        return None
    flat, at = diff.reshape(-1).argmax().item(), []
    for size in reversed(diff.shape):  # torch.unravel_index is 2.2+
        at.insert(0, flat % size)
        flat //= size
    if got.is_complex():
        at = at[:-1]  # the real/imaginary dimension view_as_real added
    def show(value):
        return str(value) if isinstance(value, complex) else "%.6g" % value
    return "differs by up to %.3g (%.3g relative to max(1, |PyTorch's value|)): at %s the graph gives %s, " \
        "PyTorch %s" % (diff.max().item(), worst, at, show(got[tuple(at)].item()), show(want[tuple(at)].item()))


# Modules whose eager forward in eval mode may take a fused "fast path" that tracing does not.
_FAST_PATH_MODULES = (torch.nn.TransformerEncoder, torch.nn.TransformerEncoderLayer, torch.nn.MultiheadAttention)


def _mismatch_hint(model):
    """Why a traced graph may compute something else than the module's own run."""
    fast = [(name or "the model", type(module).__name__) for name, module in model.named_modules()
            if isinstance(module, _FAST_PATH_MODULES) and not module.training]
    if fast:
        off = "turn it off with torch.backends.mha.set_fastpath_enabled(False) before exporting" \
            if hasattr(getattr(torch.backends, "mha", None), "set_fastpath_enabled") else \
            "this PyTorch has no switch to turn it off"
        return ("%s '%s' is in eval mode: eager PyTorch runs its fast path there (with a padding mask, nested "
                "tensors that leave zeros at padded positions), which the tracer does not take; %s" %
                (fast[0][1], fast[0][0], off))
    return ("the module takes another path when run than when traced (e.g. a fast path for inference without "
            "autograd, or Python that checks torch.is_grad_enabled() or whether it is being traced)")


def _check_reproduces(model, names, graph_values, expected):
    """The exported graph, run with eager ATen on the example inputs, must give what the file
    records as PyTorch's results (the module's own run): otherwise the "expected" values are
    ones no correct import of the graph can reproduce. `names` in the order to report;
    graph_values and expected map each name to a tensor."""
    for name in names:
        if name not in graph_values:
            why = "the graph does not compute it"
        else:
            why = _difference(graph_values[name], expected[name])
        if why is not None:
            raise GraphMismatch("the traced graph does not reproduce the module's own run on the example inputs: "
                                "'%s' %s; %s" % (name, why, _mismatch_hint(model)))


class _Blob:
    """The tensors file: raw bytes of tensors, one after another."""

    def __init__(self):
        self.parts, self.records, self.size = [], [], 0

    def add(self, name, tensor, keep_layout=False):
        """keep_layout: store the storage span the tensor views (from element 0) with its
        strides and offset, so a non-contiguous input is rebuilt as it was traced."""
        tensor = tensor.detach().to("cpu")
        record = {"name": name, "dtype": str(tensor.dtype).replace("torch.", ""), "shape": list(tensor.shape)}
        if keep_layout and (tensor.stride() != torch.empty(tensor.shape).stride() or tensor.storage_offset() != 0):
            extent = _extent(tensor)
            flat = torch.as_strided(tensor, (extent,), (1,), 0).contiguous() if extent else tensor.new_empty(0)
            record.update({"stride": list(tensor.stride()), "storage_offset": tensor.storage_offset(),
                           "storage_numel": extent})
            tensor = flat
        # A fresh row-major copy: contiguous() keeps odd strides of size-1 dimensions, which
        # view(uint8) refuses; complex and conjugated tensors are stored resolved.
        tensor = torch.empty(tensor.shape, dtype=tensor.dtype).copy_(tensor.resolve_conj().resolve_neg())
        data = tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        record.update({"offset": self.size, "nbytes": len(data)})
        self.records.append(record)
        self.parts.append(data)
        self.size += len(data)


def _write_atomically(path, data):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _attr(gm, target):
    value = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _graph_json(gm, placeholders, output_names, metas, blob):
    """placeholders: per placeholder (in order) (exported name, role). Tensors held by the
    graph module (get_attr: constants made inside forward, e.g. torch.tensor([...])) become
    placeholders with role "constant", their values stored in `blob`."""
    rename, nodes, index = {}, [], 0
    for node in gm.graph.nodes:
        where = "node '%s'" % node.name
        if node.op == "placeholder":
            name, role = placeholders[index]
            index += 1
            rename[node.name] = name
            nodes.append({"name": name, "op": "placeholder", "role": role, "meta": metas.get(node.name, [])})
        elif node.op == "get_attr":
            value = _attr(gm, node.target)
            if not isinstance(value, torch.Tensor):
                raise ExportError("%s: get_attr of a %s, not a tensor" % (where, type(value).__name__))
            name = "constant." + node.target
            rename[node.name] = name
            blob.add(name, value, keep_layout=True)
            nodes.append({"name": name, "op": "placeholder", "role": "constant", "meta": metas.get(node.name, [])})
        elif node.op == "call_function":
            rename[node.name] = node.name
            args = list(node.args)
            target = node.target
            schema = getattr(target, "_schema", None)
            if schema is not None and any(isinstance(a, complex) for a in args) and "Scalar" in schema.overload_name:
                # mul.Scalar(x, 1j): the Tensor overload takes the number as a 0-dim constant below.
                packet = getattr(torch.ops.aten, schema.name.split("::")[-1], None)
                tensor_overload = getattr(packet, schema.overload_name.replace("Scalar", "Tensor"), None)
                if tensor_overload is not None and \
                        [a.name for a in tensor_overload._schema.arguments] == [a.name for a in schema.arguments]:
                    target, schema = tensor_overload, tensor_overload._schema
            for i, arg in enumerate(args):
                # A Python complex number where the schema wants a Tensor (x * 1j): eager wraps
                # it as a 0-dim tensor; it becomes a constant input of the result's complex dtype.
                if isinstance(arg, complex) and schema is not None and i < len(schema.arguments) and \
                        str(schema.arguments[i].type) == "Tensor":
                    out = metas.get(node.name, [{}])
                    dtype = torch.complex128 if out and out[0].get("dtype") == "complex128" else torch.complex64
                    name = "constant.%s.%d" % (node.name, i)
                    value = torch.tensor(arg, dtype=dtype)
                    blob.add(name, value)
                    nodes.append({"name": name, "op": "placeholder", "role": "constant",
                                  "meta": [{"dtype": str(dtype).replace("torch.", ""), "shape": [], "stride": []}]})
                    rename[name] = name
                    args[i] = _Ref(name)
            entry = {"name": node.name, "op": "call_function", "target": _target_name(target),
                     "args": [_encode(a, rename, where) for a in args],
                     "meta": metas.get(node.name, [])}
            if node.kwargs:
                entry["kwargs"] = {k: _encode(v, rename, where) for k, v in node.kwargs.items()}
            nodes.append(entry)
        elif node.op == "output":
            nodes.append({"name": "output", "op": "output", "args": [_encode(node.args[0], rename, where)]})
        else:
            raise ExportError("%s: unsupported FX op '%s'" % (where, node.op))
    return {"nodes": nodes, "output_names": output_names}


def _as_tuple(value):
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


def _refresh_rnn_weights(model):
    """nn.LSTM/GRU/RNN read their weights from a list made at construction (_flat_weights),
    which functional_call's parameter swap does not reach: refresh it on every call."""
    def refresh(module, _):
        module._flat_weights = [getattr(module, n) if hasattr(module, n) else None
                                for n in module._flat_weights_names]
    for module in model.modules():
        if isinstance(module, torch.nn.RNNBase):
            module.register_forward_pre_hook(refresh)


def _drop_none_outputs(gm, output_names, allow, what):
    """A None output (a parameter autograd gives no gradient) is an error naming it, unless
    `allow`: then it is left out of the graph's outputs."""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    items = list(_as_tuple(output.args[0]))
    missing = [name for name, item in zip(output_names, items) if item is None]
    if not missing:
        return output_names
    if not allow:
        named = [m[:-len(".grad")] if m.endswith(".grad") else m for m in missing]
        raise ExportError("%s %s: no gradient reaches %s (autograd gives None); pass --allow_none_grads to leave "
                          "%s out" % (what, ", ".join("'%s'" % m for m in named), "it" if len(named) == 1 else "them",
                                      ", ".join("'%s'" % m for m in missing)))
    kept = [(name, item) for name, item in zip(output_names, items) if item is not None]
    output.args = (tuple(item for _, item in kept),)
    gm.recompile()
    return [name for name, _ in kept]


def export(spec, mode, tracer, out, allow_none_grads=False):
    model, inputs = spec.model, tuple(spec.inputs)
    _refresh_rnn_weights(model)
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    names = list(params) + list(buffers)
    state = [params[n] for n in params] + [buffers[n] for n in buffers]
    blob = _Blob()
    process_groups = dict(getattr(spec, "process_groups", {}) or {})
    metas = {}
    # PyTorch's own results (recorded as "expected:<name>") and the graph's, from a run of the
    # traced graph with eager ATen on copies of the same inputs; compared before writing.
    expected, graph_values = {}, {}

    def record(name, value):
        blob.add("expected:" + name, value)
        expected[name] = value

    if tracer == "export":
        if mode != "forward":
            raise ExportError("--tracer=export exports forward graphs; use make_fx for joint graphs")
        exported = torch.export.export(model, inputs).run_decompositions()
        gm = exported.graph_module
        signature = exported.graph_signature
        placeholders, values, user_index = [], [], 0
        for input_spec in signature.input_specs:
            kind = input_spec.kind.name
            if kind == "USER_INPUT":
                name = "input.%d" % user_index
                value = inputs[user_index]
                user_index += 1
                placeholders.append((name, "data"))
            else:
                role = {"PARAMETER": "param", "BUFFER": "buffer"}.get(kind, "constant")
                name = input_spec.target
                value = exported.state_dict.get(name)
                if value is None:
                    value = exported.constants[name]
                placeholders.append((name, role))
            if not isinstance(value, torch.Tensor):
                raise ExportError("input '%s' of the exported program is a %s, not a tensor" %
                                  (name, type(value).__name__))
            blob.add(name, value, keep_layout=True)
            values.append(value)
        # The importer needs every node's dtype, shape, strides and storage: run the exported
        # graph on copies (it may write its buffers) and record them, as for make_fx below.
        prop = _MetaProp(gm)
        graph_outputs = _as_tuple(prop.run(*[_clone_layout(v) for v in values]))
        metas = prop.metas
        # The program returns the buffers it writes first, then the user's outputs.
        output_names, mutated = [], []
        for output_spec in signature.output_specs:
            kind = output_spec.kind.name
            if kind == "BUFFER_MUTATION":
                output_names.append(output_spec.target + ".updated")
                mutated.append(output_spec.target)
            elif kind == "USER_OUTPUT":
                output_names.append("output.%d" % (len(output_names) - len(mutated)))
            else:
                raise ExportError("torch.export output kind %s is not supported (output '%s')" %
                                  (kind, output_spec.target))
        # PyTorch's own run: its outputs, and the buffers it wrote (their inputs were stored above).
        with torch.no_grad():
            eager = _as_tuple(model(*inputs))
        for k, value in enumerate(eager):
            record("output.%d" % k, value)
        for name in mutated:
            record("%s.updated" % name, buffers[name])
        graph_values = dict(zip(output_names, graph_outputs))
    elif mode == "forward":
        def forward(*flat):
            return _as_tuple(functional_call(model, dict(zip(names, flat[:len(names)])), tuple(flat[len(names):])))

        placeholders = [(n, "param") for n in params] + [(n, "buffer") for n in buffers] + \
                       [("input.%d" % k, "data") for k in range(len(inputs))]
        originals = tuple(state) + inputs
        for (name, _), value in zip(placeholders, originals):
            blob.add(name, value, keep_layout=True)
        # Trace (which runs the ops) and propagate metadata on copies: the graph may write
        # to its inputs, and PyTorch's own run below must start from the original values.
        gm = make_fx(forward)(*[_clone_layout(t) for t in originals])
        traced_outputs = len(_as_tuple(next(n for n in gm.graph.nodes if n.op == "output").args[0]))
        graph_outputs, graph_args = _check_comparable(gm, lambda: [_clone_layout(t) for t in originals],
                                                      ["output.%d" % k for k in range(traced_outputs)])
        prop = _MetaProp(gm)
        prop.run(*[_clone_layout(t) for t in originals])
        metas = prop.metas
        written = _written_placeholders(gm, metas, placeholders)
        with torch.no_grad():
            eager = _as_tuple(model(*inputs))
        output_names = ["output.%d" % k for k in range(len(eager))]
        for name, value in zip(output_names, eager):
            record(name, value)
        graph_values = dict(zip(["output.%d" % k for k in range(traced_outputs)], graph_outputs))
        for (name, _), value, graph_value in zip(placeholders, originals, graph_args):
            if name in written:
                record("%s.updated" % name, value)
                graph_values["%s.updated" % name] = graph_value
    elif mode == "joint":
        targets = tuple(spec.loss_inputs)
        n_params = len(params)

        def joint(*flat):
            ps = flat[:n_params]
            state_dict = dict(zip(names, flat[:len(names)]))
            data = flat[len(names):len(names) + len(inputs)]
            extra = flat[len(names) + len(inputs):]
            loss = spec.loss_fn(functional_call(model, state_dict, tuple(data)), *extra)
            grads = torch.autograd.grad(loss, ps, allow_unused=True)
            return (loss,) + tuple(grads)

        placeholders = [(n, "param") for n in params] + [(n, "buffer") for n in buffers] + \
                       [("input.%d" % k, "data") for k in range(len(inputs))] + \
                       [("target.%d" % k, "data") for k in range(len(targets))]
        originals = tuple(state) + inputs + targets
        for (name, _), value in zip(placeholders, originals):
            blob.add(name, value, keep_layout=True)

        def copies():
            return [_clone_layout(t).requires_grad_(k < n_params) for k, t in enumerate(originals)]

        gm = make_fx(joint)(*copies())
        prop = _MetaProp(gm)
        prop.run(*copies())
        metas = prop.metas
        written = _written_placeholders(gm, metas, placeholders)
        output_names = _drop_none_outputs(gm, ["loss"] + [n + ".grad" for n in params], allow_none_grads,
                                          "parameter(s)")
        graph_outputs, graph_args = _check_comparable(gm, copies, output_names)
        graph_values = dict(zip(output_names, graph_outputs))
        # PyTorch's own step on the original state: loss, gradients, updated buffers and inputs.
        model.zero_grad(set_to_none=True)
        loss = spec.loss_fn(model(*inputs), *targets)
        loss.backward()
        record("loss", loss)
        for n, p in params.items():
            if n + ".grad" in output_names:
                if p.grad is None:
                    raise ExportError("parameter '%s': the traced graph has a gradient, PyTorch's run has none" % n)
                record("%s.grad" % n, p.grad)
        for (name, role), value, graph_value in zip(placeholders, originals, graph_args):
            if name in written:
                record("%s.updated" % name, value)
                graph_values["%s.updated" % name] = graph_value
    else:
        raise ExportError("--mode is forward or joint, not %r" % mode)
    _check_reproduces(model, list(expected), graph_values, expected)

    document = {"format": "magi-fx", "version": 1, "torch_version": torch.__version__,
                "tracer": "torch.export" if tracer == "export" else "make_fx", "kind": mode,
                "graph_name": mode, "tensors_file": os.path.basename(out) + ".tensors"}
    if process_groups:
        document["process_groups"] = process_groups
    document.update(_graph_json(gm, placeholders, output_names, metas, blob))
    document["tensors"] = blob.records
    _write_atomically(out + ".tensors", b"".join(blob.parts))
    _write_atomically(out + ".fx.json", json.dumps(document, indent=1).encode())
    return gm


def load_spec(text, **kwargs):
    module_name, _, function = text.partition(":")
    if not function:
        raise ExportError("--spec is module.path:function, not %r" % text)
    return getattr(importlib.import_module(module_name), function)(**kwargs)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spec", help="module.path:function returning a ModelSpec")
    parser.add_argument("--mode", default="forward", choices=["forward", "joint"])
    parser.add_argument("--tracer", default="make_fx", choices=["make_fx", "export"])
    parser.add_argument("--out", help="output prefix: writes PREFIX.fx.json and PREFIX.tensors")
    parser.add_argument("--export", nargs=3, action="append", default=[], metavar=("SPEC", "MODE", "OUT"),
                        help="one export of several (instead of --spec, --mode and --out); repeatable")
    parser.add_argument("--print_graph", action="store_true", help="print the traced FX graph")
    parser.add_argument("--allow_none_grads", action="store_true",
                        help="joint: leave out gradients autograd does not make (default: an error naming them)")
    args = parser.parse_args(argv)
    if args.export and (args.spec or args.out):
        parser.error("--export replaces --spec, --mode and --out")
    if not args.export:
        if not args.spec or not args.out:
            parser.error("--spec and --out are required (or one --export per export)")
        args.export = [[args.spec, args.mode, args.out]]
    for spec_text, mode, out in args.export:
        if mode not in ("forward", "joint"):
            parser.error("--export %s %s %s: the mode is forward or joint" % (spec_text, mode, out))
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for spec_text, mode, out in args.export:
        try:
            spec = load_spec(spec_text, mode=mode)
            gm = export(spec, mode, args.tracer, out, args.allow_none_grads)
        except ExportError as error:
            print("fx_export: %s" % error, file=sys.stderr)
            if len(args.export) > 1:
                print("fx_export: export of %s (%s) to %s failed" % (spec_text, mode, out), file=sys.stderr)
            return 1
        ops = sum(1 for n in gm.graph.nodes if n.op == "call_function")
        if args.print_graph:
            print(gm.graph)
        print("fx_export: %s (%s, %s, torch %s): %d ops -> %s.fx.json" % (spec_text, mode, args.tracer,
                                                                           torch.__version__, ops, out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
