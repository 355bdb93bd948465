"""BUILD text for a target that exists but fails with a clear message when built.

Configure rules use it for optional dependencies (CUDA, NCCL, LibTorch's CUDA part)
that the machine lacks: a CPU-only build never touches the target, and a build
that needs it stops with the reason instead of a missing-header or link error.
"""

def unavailable_target(name, message):
    """Returns BUILD text defining cc_library `name` whose build fails with `message`."""
    return """
genrule(
    name = "{name}_unavailable",
    outs = ["{name}_unavailable.h"],
    cmd = "echo 'ERROR: {message}' >&2; exit 1",
)

cc_library(
    name = "{name}",
    hdrs = [":{name}_unavailable.h"],
)
""".format(name = name, message = message.replace("'", "").replace('"', ""))
