"""cc_precompiled_header: one GCC precompiled header (.gch) that C++ targets force-include.

Parsing <torch/torch.h> costs every translation unit that includes it 23 s (LibTorch 1.13) to
30 s (2.12) of its ~35-45 s compile on this project's CI machines; a precompiled header loads the
same declarations in about a second. The rule writes NAME.h (one #include per entry of
`includes`), compiles it with the exact command line Bazel uses for C++ compiles in this
configuration (the toolchain's features, --copt/--cxxopt, the deps' include paths and defines,
-fPIC), and returns a CcInfo whose headers are NAME.h and NAME.h.gch and whose quote include path
is their directory. A target that depends on it and compiles with `-include NAME.h` gets NAME.h.gch
from GCC when the .gch is valid for that compile, and NAME.h parsed as text when it is not (GCC
checks the options and macros a .gch was made with and silently ignores one that does not fit):
a mismatch costs time, never correctness. torch_cc.bzl wraps cc rules to do this.

What it does not do: clang's -include-pch (the toolchain here is GCC), several precompiled headers
per target (GCC uses only the first), or a PIC and a non-PIC variant (it makes the PIC one, which
is what fastbuild compiles; torch_cc.bzl uses it in fastbuild only).
"""

load("@bazel_tools//tools/build_defs/cc:action_names.bzl", "CPP_COMPILE_ACTION_NAME")

def _cc_precompiled_header_impl(ctx):
    deps_cc_info = cc_common.merge_cc_infos(cc_infos = [dep[CcInfo] for dep in ctx.attr.deps])
    header = ctx.actions.declare_file(ctx.label.name + ".h")
    ctx.actions.write(header, "".join(["#include <%s>\n" % include for include in ctx.attr.includes]))
    headers = [header]

    cc_toolchain = ctx.attr._cc_toolchain[cc_common.CcToolchainInfo]
    if ctx.attr.enabled and "clang" not in getattr(cc_toolchain, "compiler_executable", ""):
        feature_configuration = cc_common.configure_features(
            ctx = ctx,
            cc_toolchain = cc_toolchain,
            requested_features = ctx.features,
            unsupported_features = ctx.disabled_features,
        )
        deps_context = deps_cc_info.compilation_context
        gch = ctx.actions.declare_file(ctx.label.name + ".h.gch")
        variables = cc_common.create_compile_variables(
            feature_configuration = feature_configuration,
            cc_toolchain = cc_toolchain,
            user_compile_flags = ctx.fragments.cpp.copts + ctx.fragments.cpp.cxxopts + ["-x", "c++-header"],
            source_file = header.path,
            output_file = gch.path,
            preprocessor_defines = deps_context.defines,
            include_directories = deps_context.includes,
            quote_include_directories = deps_context.quote_includes,
            system_include_directories = deps_context.system_includes,
            use_pic = True,
        )
        ctx.actions.run(
            executable = cc_common.get_tool_for_action(
                feature_configuration = feature_configuration,
                action_name = CPP_COMPILE_ACTION_NAME,
            ),
            arguments = cc_common.get_memory_inefficient_command_line(
                feature_configuration = feature_configuration,
                action_name = CPP_COMPILE_ACTION_NAME,
                variables = variables,
            ),
            env = cc_common.get_environment_variables(
                feature_configuration = feature_configuration,
                action_name = CPP_COMPILE_ACTION_NAME,
                variables = variables,
            ),
            inputs = depset([header], transitive = [cc_toolchain.all_files, deps_context.headers]),
            outputs = [gch],
            mnemonic = "CppPrecompileHeader",
            progress_message = "Precompiling %s (%s)" % (", ".join(ctx.attr.includes), gch.short_path),
        )
        headers.append(gch)

    own = CcInfo(compilation_context = cc_common.create_compilation_context(
        headers = depset(headers),
        quote_includes = depset([header.dirname]),
    ))
    return [
        DefaultInfo(files = depset(headers)),
        # cc_infos, not direct_cc_infos: Bazel 2.1 (the GPU machine's) has only the former.
        cc_common.merge_cc_infos(cc_infos = [own, deps_cc_info]),
    ]

cc_precompiled_header = rule(
    implementation = _cc_precompiled_header_impl,
    attrs = {
        "includes": attr.string_list(mandatory = True, allow_empty = False, doc = "headers, as in #include <...>"),
        "deps": attr.label_list(providers = [CcInfo], doc = "the libraries that provide those headers"),
        "enabled": attr.bool(default = True, doc = "False writes only NAME.h (parsed as text)"),
        "_cc_toolchain": attr.label(default = Label("@bazel_tools//tools/cpp:current_cc_toolchain")),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    provides = [CcInfo],
)
