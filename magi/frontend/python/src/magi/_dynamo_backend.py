"""The "magi" backend of torch.compile.

Dynamo captures a Python frame as an FX graph; AOTAutograd (torch._dynamo.backends.common.
aot_autograd) functionalizes it into ATen-level forward and backward graphs; each of those
is written in memory in the FX frontend's format (tools/fx_export.py's serializer, bundled
here as magi._fx_export) and compiled by Magi's C++ compile driver (magi._C.CompiledGraph:
FX importer -> passes -> partition backends -> primary backend). Guards, recompiles and
graph breaks are Dynamo's: a break is reported as a warning, never hidden, and
torch.compile(..., fullgraph=True) turns it into an error. A graph the FX importer refuses
fails the compile with magi.MagiError naming the node and why.
"""

import json
import warnings

import torch
import torch.fx
from torch._dynamo.backends.common import aot_autograd
from torch.utils.dlpack import from_dlpack, to_dlpack

from . import _C
from . import _fx_export as fx_export

# torch.compile(model, backend="magi", options={...}): what each key means.
OPTIONS = {
    "backend": "the primary backend's spec (default 'interpreter'; 'nccl_stream' on CUDA)",
    "partitions": "partition backends in order of preference, e.g. ['elementwise']",
    "partition_min_nodes": "shorter runs of accepted nodes stay with the primary backend (default 1)",
    "partition_max_nodes": "longer runs are split (default 0: no limit)",
    "deterministic": "deterministic mode (docs/deterministic.md; call magi.enable_deterministic_mode() first): "
                     "backends refuse what is not reproducible",
    "memory_budget_bytes": "the strategy search picks the pass pipeline whose predicted peak fits",
    "passes": "a pass pipeline, e.g. 'dce' (not with memory_budget_bytes)",
    "device_profile": "the cost model's device profile (default 'cpu')",
    "calibration": "'none' (default here) or a CalibrationTable CSV for the cost model",
    "expected_plan_hash": "fail the compile unless the plan has this hash",
    "log": "print what the compile driver decided (partitions, fallbacks) to stderr",
}
_OPTIMIZATION_KEYS = ("partitions", "partition_min_nodes", "partition_max_nodes", "deterministic",
                      "memory_budget_bytes", "passes", "device_profile", "calibration", "expected_plan_hash")

MagiError = _C.MagiError


def _check_options(options):
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise MagiError("unknown option(s) %s for backend='magi'; known: %s" %
                        (", ".join(map(repr, unknown)), ", ".join(sorted(OPTIONS))))
    return options


def _is_static(value):
    if isinstance(value, torch.Tensor):
        return all(isinstance(s, int) for s in value.shape) and all(isinstance(s, int) for s in value.stride()) \
            and isinstance(value.storage_offset(), int)
    return not isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool))


def _storage_key(tensor):
    try:
        return tensor.untyped_storage()._cdata
    except Exception:  # no storage (a ZeroTensor, a tensor subclass): nothing can alias it
        return None


def _metas(gm):
    """The FX frontend's tensor metadata per node, from the fake values AOTAutograd traced
    with (node.meta["val"]): dtype, shape, strides, storage offset and storage identity."""
    ids, metas = {}, {}

    def meta(value):
        if not isinstance(value, torch.Tensor):
            return {"absent": True}
        key = _storage_key(value)
        return {"dtype": str(value.dtype).replace("torch.", ""), "shape": list(value.shape),
                "stride": list(value.stride()), "storage_offset": value.storage_offset(),
                "storage": ids.setdefault(key, len(ids) + 1) if key is not None else 0}

    for node in gm.graph.nodes:
        if node.op == "output":
            continue
        if "val" not in node.meta:
            raise MagiError("node '%s' (%s %s) has no traced value (meta['val']); Magi compiles AOTAutograd's "
                            "ATen graphs" % (node.name, node.op, node.target))
        value = node.meta["val"]
        values = value if isinstance(value, (list, tuple)) else [value]
        if not all(_is_static(v) for v in values):
            raise MagiError("node '%s' has symbolic shapes (%s): Magi compiles static shapes; use "
                            "torch.compile(..., dynamic=False)" % (node.name, value))
        if isinstance(value, (list, tuple)):
            metas[node.name] = [meta(v) for v in value]
        elif isinstance(value, torch.Tensor):
            metas[node.name] = [meta(value)]
        else:
            metas[node.name] = []
    return metas


def _check_targets(gm):
    for node in gm.graph.nodes:
        if node.op == "call_function":
            try:
                fx_export._target_name(node.target)
            except fx_export.ExportError as error:
                raise MagiError("node '%s': %s" % (node.name, error)) from None
        elif node.op not in ("placeholder", "output", "get_attr"):
            raise MagiError("node '%s': FX op '%s' is not supported (ATen graphs only)" % (node.name, node.op))


class CompiledGraph:
    """A Magi-compiled ATen FX graph, called as AOTAutograd calls its compiled graphs (a list
    of tensors in, a list out, in the graph's placeholder and output order)."""

    def __init__(self, gm, options, name):
        # In the instance's __dict__, so that Dynamo's wrappers (functools.wraps) keep it.
        self._boxed_call = True
        # AOTAutograd calls its compilers under its FakeTensorMode; the constants the graph
        # holds are real tensors, read here outside it.
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        with unset_fake_temporarily():
            self._compile(gm, dict(options), name)

    def _compile(self, gm, options, name):
        _check_targets(gm)
        metas = _metas(gm)
        placeholders = [(node.name, "data") for node in gm.graph.nodes if node.op == "placeholder"]
        output = next(node for node in gm.graph.nodes if node.op == "output")
        items = list(output.args[0]) if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
        # Outputs that are no tensor (None gradients, numbers) are returned by Python as they are.
        self._outputs = []  # per output: ("tensor", index into Magi's outputs) or ("value", the value)
        kept = []
        for item in items:
            if isinstance(item, torch.fx.Node) and isinstance(item.meta.get("val"), torch.Tensor):
                self._outputs.append(("tensor", len(kept)))
                kept.append(item)
            elif isinstance(item, torch.fx.Node):
                raise MagiError("output '%s' of graph %s is a %s, not a tensor" %
                                (item.name, name, type(item.meta.get("val")).__name__))
            else:
                self._outputs.append(("value", item))
        blob = fx_export._Blob()
        try:
            document = fx_export._graph_json(gm, placeholders, ["output.%d" % k for k in range(len(kept))], metas, blob)
        except fx_export.ExportError as error:
            raise MagiError("graph %s: %s" % (name, error)) from None
        exported = {n: ("constant." + n.target if n.op == "get_attr" else n.name) for n in gm.graph.nodes}
        for node in document["nodes"]:
            if node["op"] == "output":
                node["args"] = [{"list": {"items": [{"node": exported[item]} for item in kept]}}]
        document.update({"format": "magi-fx", "version": 1, "torch_version": torch.__version__,
                         "tracer": "aot_autograd", "kind": "forward", "graph_name": "forward"})
        optimization = {k: options[k] for k in _OPTIMIZATION_KEYS if k in options}
        self._graph = _C.CompiledGraph(json.dumps(document), options.get("backend", "interpreter"), optimization,
                                       bool(options.get("log", False)), name)
        position = {n: k for k, (n, _) in enumerate(placeholders)}
        constants = {"constant." + n.target: fx_export._attr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"}
        # Per Magi input: the index of the argument, or the constant tensor it is.
        self._inputs = []
        for input_name in self._graph.input_names:
            if input_name in position:
                self._inputs.append(position[input_name])
            elif isinstance(constants.get(input_name), torch.Tensor):
                self._inputs.append(constants[input_name])
            else:
                raise MagiError("graph %s: Magi input '%s' is neither an argument nor a constant" % (name, input_name))
        self.name = name
        self.plan_hash = self._graph.plan_hash
        self.num_nodes = self._graph.num_nodes

    def __call__(self, *args):
        # Boxed (one list, AOTAutograd's convention for compiled graphs) or unboxed (the
        # backward, called through Dynamo's wrapper, which hides _boxed_call).
        if len(args) == 1 and isinstance(args[0], list):
            args = args[0]
        capsules = []
        for source in self._inputs:
            tensor = args[source] if isinstance(source, int) else source
            capsules.append(to_dlpack(tensor.detach().resolve_conj().resolve_neg()))
        results = [from_dlpack(c) for c in self._graph.run(capsules)]
        return [results[where] if kind == "tensor" else where for kind, where in self._outputs]


def compile_graph(gm, options=None, name="graph"):
    """Compiles an ATen-level FX GraphModule (fake values in node.meta["val"], as AOTAutograd
    and make_fx give) with Magi; returns a CompiledGraph."""
    return CompiledGraph(gm, _check_options(options), name)


_reported_breaks = set()


def _report_graph_breaks():
    from torch._dynamo.utils import counters
    for reason in list(counters["graph_break"]):
        if reason not in _reported_breaks:
            _reported_breaks.add(reason)
            warnings.warn("magi: Dynamo broke the graph (%s); the parts are compiled separately, the code between "
                          "them runs in Python. torch.compile(..., fullgraph=True) makes this an error." % reason,
                          stacklevel=2)


def magi_backend(gm, example_inputs, options=None, mode=None):
    """The "magi" backend: torch.compile(model, backend="magi", options={...}) (see OPTIONS)."""
    if mode is not None:
        raise MagiError("backend='magi' takes no mode (got %r); pass options= instead" % (mode,))
    options = _check_options(options)
    _report_graph_breaks()
    counter = {"n": 0}

    def compiler(kind):
        def compile_one(graph_module, inputs):
            counter["n"] += 1
            return CompiledGraph(graph_module, options, "%s %d" % (kind, counter["n"]))
        return compile_one

    return aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                        inference_compiler=compiler("inference"))(gm, example_inputs)


def _register():
    from torch._dynamo import list_backends, register_backend
    if "magi" not in list_backends(exclude_tags=()):
        register_backend(compiler_fn=magi_backend, name="magi")


_register()
