"""Offline stand-ins for the repositories Bazel itself would download.

Bazel 4.2.3 (and 2.1 on the GPU machine) fetch @rules_cc, @rules_java and
@remote_coverage_tools from the network on first use. These repository rules
write small local equivalents that re-export the rules built into Bazel, so a
machine with no internet access builds and tests without them. They do NOT
provide anything beyond the native rules (no Starlark reimplementation).
"""

_RULES_CC_DEFS = """\
\"\"\"rules_cc stand-in: re-exports Bazel's native C++ rules.\"\"\"
cc_binary = native.cc_binary
cc_import = native.cc_import
cc_library = native.cc_library
cc_proto_library = native.cc_proto_library
cc_shared_library = getattr(native, "cc_shared_library", None)
cc_test = native.cc_test
cc_toolchain = native.cc_toolchain
cc_toolchain_suite = native.cc_toolchain_suite
fdo_prefetch_hints = native.fdo_prefetch_hints
fdo_profile = native.fdo_profile
objc_import = native.objc_import
objc_library = native.objc_library
"""

_RULES_JAVA_DEFS = """\
\"\"\"rules_java stand-in: re-exports Bazel's native Java rules.\"\"\"
java_binary = native.java_binary
java_import = native.java_import
java_library = native.java_library
java_lite_proto_library = native.java_lite_proto_library
java_package_configuration = native.java_package_configuration
java_plugin = native.java_plugin
java_proto_library = native.java_proto_library
java_runtime = native.java_runtime
java_test = native.java_test
java_toolchain = native.java_toolchain
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
