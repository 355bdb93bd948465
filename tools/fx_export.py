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


def _encode(value, rename, where):
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


def _tensor_meta(value):
    if isinstance(value, torch.Tensor):
        return {"dtype": str(value.dtype).replace("torch.", ""), "shape": list(value.shape),
                "stride": list(value.stride())}
    # torch.fx.passes.shape_prop.TensorMetadata
    if hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "stride"):
        return {"dtype": str(value.dtype).replace("torch.", ""), "shape": list(value.shape),
                "stride": list(value.stride)}
    return {"absent": True}


def _node_meta(node):
    value = node.meta.get("val", node.meta.get("tensor_meta"))
    if value is None:
        return []
    if isinstance(value, (list, tuple)) and not hasattr(value, "shape"):
        return [_tensor_meta(v) for v in value]
    return [_tensor_meta(value)]


class _Blob:
    """The tensors file: raw bytes of contiguous tensors, one after another."""

    def __init__(self):
        self.parts, self.records, self.size = [], [], 0

    def add(self, name, tensor):
        tensor = tensor.detach().to("cpu").contiguous()
        data = tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        self.records.append({"name": name, "dtype": str(tensor.dtype).replace("torch.", ""),
                             "shape": list(tensor.shape), "offset": self.size, "nbytes": len(data)})
        self.parts.append(data)
        self.size += len(data)


def _write_atomically(path, data):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _graph_json(gm, placeholders, output_names):
    """placeholders: per placeholder (in order) (exported name, role)."""
    rename, nodes, index = {}, [], 0
    for node in gm.graph.nodes:
        where = "node '%s'" % node.name
        if node.op == "placeholder":
            name, role = placeholders[index]
            index += 1
            rename[node.name] = name
            nodes.append({"name": name, "op": "placeholder", "role": role, "meta": _node_meta(node)})
        elif node.op == "call_function":
            rename[node.name] = node.name
            entry = {"name": node.name, "op": "call_function", "target": _target_name(node.target),
                     "args": [_encode(a, rename, where) for a in node.args],
                     "meta": _node_meta(node)}
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


def export(spec, mode, tracer, out):
    model, inputs = spec.model, tuple(spec.inputs)
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    names = list(params) + list(buffers)
    state = [params[n] for n in params] + [buffers[n] for n in buffers]
    blob = _Blob()
    process_groups = dict(getattr(spec, "process_groups", {}) or {})

    if tracer == "export":
        if mode != "forward":
            raise ExportError("--tracer=export exports forward graphs; use make_fx for joint graphs")
        exported = torch.export.export(model, inputs).run_decompositions()
        gm = exported.graph_module
        signature = exported.graph_signature
        placeholders, user_index = [], 0
        for input_spec in signature.input_specs:
            kind = input_spec.kind.name
            if kind == "USER_INPUT":
                name = "input.%d" % user_index
                blob.add(name, inputs[user_index])
                user_index += 1
                placeholders.append((name, "data"))
            else:
                role = "param" if kind == "PARAMETER" else "buffer"
                value = exported.state_dict.get(input_spec.target)
                if value is None:
                    value = exported.constants[input_spec.target]
                blob.add(input_spec.target, value)
                placeholders.append((input_spec.target, role))
        output_names = []
        for k, output_spec in enumerate(signature.output_specs):
            if output_spec.kind.name == "BUFFER_MUTATION":
                output_names.append(output_spec.target + ".updated")
            else:
                output_names.append("output.%d" % k)
        with torch.no_grad():
            expected = _as_tuple(model(*inputs))
        for k, value in enumerate(expected):
            blob.add("expected:output.%d" % k, value)
    elif mode == "forward":
        def forward(*flat):
            return _as_tuple(functional_call(model, dict(zip(names, flat[:len(names)])), tuple(flat[len(names):])))

        args = tuple(t.detach() for t in state) + inputs
        gm = make_fx(forward)(*args)
        torch.fx.passes.shape_prop.ShapeProp(gm).propagate(*[a.clone() for a in args])
        placeholders = [(n, "param") for n in params] + [(n, "buffer") for n in buffers] + \
                       [("input.%d" % k, "data") for k in range(len(inputs))]
        for (name, _), value in zip(placeholders, args):
            blob.add(name, value)
        with torch.no_grad():
            expected = _as_tuple(model(*inputs))
        output_names = ["output.%d" % k for k in range(len(expected))]
        for name, value in zip(output_names, expected):
            blob.add("expected:" + name, value)
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

        originals = {n: b.detach().clone() for n, b in buffers.items()}
        traced_state = [p.detach().clone().requires_grad_(True) for p in params.values()] + \
                       [b.detach().clone() for b in buffers.values()]
        args = tuple(traced_state) + inputs + targets
        gm = make_fx(joint)(*args)
        shape_args = [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
                      for a in args]
        torch.fx.passes.shape_prop.ShapeProp(gm).propagate(*shape_args)
        placeholders = [(n, "param") for n in params] + [(n, "buffer") for n in buffers] + \
                       [("input.%d" % k, "data") for k in range(len(inputs))] + \
                       [("target.%d" % k, "data") for k in range(len(targets))]
        for (name, role), value in zip(placeholders, args):
            blob.add(name, originals[name] if role == "buffer" else value)
        # PyTorch's own step on a fresh copy of the state: loss, gradients, updated buffers.
        for name, value in originals.items():
            buffers[name].data.copy_(value)
        model.zero_grad(set_to_none=True)
        loss = spec.loss_fn(model(*inputs), *targets)
        loss.backward()
        output_names = ["loss"] + [n + ".grad" for n in params]
        blob.add("expected:loss", loss)
        for n, p in params.items():
            if p.grad is not None:
                blob.add("expected:%s.grad" % n, p.grad)
        for n, b in model.named_buffers():
            if not torch.equal(b, originals[n]):
                blob.add("expected:%s.updated" % n, b)
    else:
        raise ExportError("--mode is forward or joint, not %r" % mode)

    document = {"format": "magi-fx", "version": 1, "torch_version": torch.__version__,
                "tracer": "torch.export" if tracer == "export" else "make_fx", "kind": mode,
                "graph_name": mode, "tensors_file": os.path.basename(out) + ".tensors",
                "tensors": blob.records}
    if process_groups:
        document["process_groups"] = process_groups
    document.update(_graph_json(gm, placeholders, output_names))
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
    parser.add_argument("--spec", required=True, help="module.path:function returning a ModelSpec")
    parser.add_argument("--mode", default="forward", choices=["forward", "joint"])
    parser.add_argument("--tracer", default="make_fx", choices=["make_fx", "export"])
    parser.add_argument("--out", required=True, help="output prefix: writes PREFIX.fx.json and PREFIX.tensors")
    parser.add_argument("--print_graph", action="store_true", help="print the traced FX graph")
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        spec = load_spec(args.spec, mode=args.mode)
        gm = export(spec, args.mode, args.tracer, args.out)
    except ExportError as error:
        print("fx_export: %s" % error, file=sys.stderr)
        return 1
    ops = sum(1 for n in gm.graph.nodes if n.op == "call_function")
    if args.print_graph:
        print(gm.graph)
    print("fx_export: %s (%s, %s, torch %s): %d ops -> %s.fx.json" % (args.spec, args.mode, args.tracer,
                                                                       torch.__version__, ops, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
