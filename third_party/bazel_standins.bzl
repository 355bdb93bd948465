"""Offline stand-ins for the repositories Bazel itself would download.

Bazel 4.2.3 (and 2.1 on the GPU machine) fetch @rules_cc, @rules_java and
@remote_coverage_tools from the network on first use. These repository rules
write small local equivalents that re-export the rules built into Bazel, so a
machine with no internet access builds and tests without them. They do NOT
provide anything beyond the native rules (no Starlark reimplementation).
"""

_RULES_CC_DEFS = """\
\"\"\"rules_cc stand-in: re-exports Bazel's native C++ rules.\"\"\"
cc_binary = getattr(native, "cc_binary", None)
cc_import = getattr(native, "cc_import", None)
cc_library = getattr(native, "cc_library", None)
cc_proto_library = getattr(native, "cc_proto_library", None)
cc_shared_library = getattr(native, "cc_shared_library", None)
cc_test = getattr(native, "cc_test", None)
cc_toolchain = getattr(native, "cc_toolchain", None)
cc_toolchain_suite = getattr(native, "cc_toolchain_suite", None)
fdo_prefetch_hints = getattr(native, "fdo_prefetch_hints", None)
fdo_profile = getattr(native, "fdo_profile", None)
objc_import = getattr(native, "objc_import", None)
objc_library = getattr(native, "objc_library", None)
"""

_RULES_JAVA_DEFS = """\
\"\"\"rules_java stand-in: re-exports Bazel's native Java rules.\"\"\"
java_binary = getattr(native, "java_binary", None)
java_import = getattr(native, "java_import", None)
java_library = getattr(native, "java_library", None)
java_lite_proto_library = getattr(native, "java_lite_proto_library", None)
java_package_configuration = getattr(native, "java_package_configuration", None)
java_plugin = getattr(native, "java_plugin", None)
java_proto_library = getattr(native, "java_proto_library", None)
java_runtime = getattr(native, "java_runtime", None)
java_test = getattr(native, "java_test", None)
java_toolchain = getattr(native, "java_toolchain", None)
"""

def _rules_cc_standin_impl(ctx):
    ctx.file("WORKSPACE", "workspace(name = \"rules_cc\")\n")
    ctx.file("BUILD", "")
    ctx.file("cc/BUILD", "")
    ctx.file("cc/defs.bzl", _RULES_CC_DEFS)

def _rules_java_standin_impl(ctx):
    ctx.file("WORKSPACE", "workspace(name = \"rules_java\")\n")
    ctx.file("BUILD", "")
    ctx.file("java/BUILD", "")
    ctx.file("java/defs.bzl", _RULES_JAVA_DEFS)

def _remote_coverage_tools_standin_impl(ctx):
    ctx.file("WORKSPACE", "workspace(name = \"remote_coverage_tools\")\n")
    ctx.file("BUILD", """\
# Coverage is not collected offline; these empty groups satisfy the test rules' implicit attributes.
package(default_visibility = ["//visibility:public"])
filegroup(name = "coverage_report_generator")
filegroup(name = "lcov_merger")
""")

rules_cc_standin = repository_rule(implementation = _rules_cc_standin_impl)
rules_java_standin = repository_rule(implementation = _rules_java_standin_impl)
remote_coverage_tools_standin = repository_rule(implementation = _remote_coverage_tools_standin_impl)
