"""fx_exports: FX graphs exported at build time by tools/fx_export.py, several in one process.

    load("//magi/frontend/fx:fx_exports.bzl", "fx_exports")
    fx_exports(
        name = "exports_forward",
        exports = {
            "export_resnet18_forward": ("tools.fx_models:resnet18", "forward", "exported/resnet18_forward"),
            "export_vit_forward": ("tools.fx_models:vit", "forward", "exported/vit_forward"),
        },
    )

makes one genrule, NAME, that runs the Python of the configured LibTorch (@libtorch//:python3) on
tools/fx_export.py once with one --export per entry, writing PREFIX.fx.json and PREFIX.tensors in
this package for each; and per entry a filegroup of those two files, named by its key, so that
targets depend on the exports they read. One process for many exports, because importing PyTorch
(and torchvision) costs ~3 s of CPU per process with 2.12, more than most small exports take.

`srcs`: the spec modules besides tools/fx_models.py (which every export may use); `tracer`:
make_fx (the default) or export (torch.export, PyTorch 2.x, forward graphs only).
What it does not do: run exports in parallel (Bazel runs other actions beside it), or keep an
export that succeeded when a later one of the same genrule fails (the genrule fails as a whole).
"""

def fx_exports(name, exports, srcs = [], tracer = "make_fx", visibility = None):
    outs = []
    arguments = []
    for label in sorted(exports.keys()):
        spec, mode, prefix = exports[label]
        files = [prefix + ".fx.json", prefix + ".tensors"]
        outs += files
        arguments.append("--export %s %s $(@D)/%s" % (spec, mode, prefix))
        native.filegroup(
            name = label,
            srcs = files,
            visibility = visibility,
        )
    native.genrule(
        name = name,
        srcs = ["//tools:fx_export.py", "//tools:fx_models.py"] + srcs,
        outs = outs,
        cmd = "$(location @libtorch//:python3) $(location //tools:fx_export.py) --tracer %s %s > /dev/null" % (
            tracer,
            " ".join(arguments),
        ),
        tools = ["@libtorch//:python3"],
        visibility = visibility,
    )
