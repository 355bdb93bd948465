"""A repository rule that exposes a system-installed C/C++ library under its upstream labels.

In the style of TensorFlow's third_party/systemlibs: the overlay keeps the
labels of the upstream Bazel build (for example @com_google_absl//absl/status:statusor)
so consumers do not change if a bundled copy replaces the system one.

The install prefix comes from an environment variable (MAGI_SYSROOT by default,
else /usr). Header folders are symlinked under include/ so that headers are
declared inputs (Bazel rejects include paths outside its execution root), and
libraries are linked by name from the prefix's library folder.
"""

def _system_library_impl(ctx):
    prefix = ctx.os.environ.get(ctx.attr.prefix_env, "") or ctx.attr.default_prefix
    include = prefix + "/include"
    for d in ctx.attr.include_dirs:
        src = ctx.path(include + "/" + d)
        if not src.exists:
            fail(("\n%s: %s not found.\n  Install the Debian packages %s (tools/bazel does this), " +
                  "or point %s at a prefix that has include/%s.") %
                 (ctx.name, src, ", ".join(ctx.attr.debian_packages), ctx.attr.prefix_env, d))
        ctx.symlink(src, "include/" + d)
    # Each library may sit in any of the usual folders (Debian puts libgloo in lib/).
    libdirs = []
    for lib in ctx.attr.required_libs:
        found = None
        for sub in ["lib/x86_64-linux-gnu", "lib64", "lib"]:
            for ext in [".so", ".a"]:
                if not found and ctx.path("%s/%s/lib%s%s" % (prefix, sub, lib, ext)).exists:
                    found = prefix + "/" + sub
        if not found:
            fail("\n%s: lib%s.{so,a} not found under %s/lib.\n  Install the Debian packages %s (tools/bazel does this)." %
                 (ctx.name, lib, prefix, ", ".join(ctx.attr.debian_packages)))
        if found not in libdirs:
            libdirs.append(found)

    # The default prefix's folders are on the compiler's and linker's default paths.
    libdir_flags = []
    if prefix != "/usr":
        for libdir in libdirs:
            libdir_flags += ["-L" + libdir, "-Wl,-rpath," + libdir]

        # DT_RPATH (not RUNPATH) so the libraries' own dependencies are found there too.
        libdir_flags.append("-Wl,--disable-new-dtags")
    substitutions = {
        "%{LIBDIR_FLAGS}": repr(libdir_flags),
        "%{PREFIX}": prefix,
    }
    ctx.template("BUILD", ctx.attr.build_file, substitutions)
    for package, content in ctx.attr.packages.items():
        for key, value in substitutions.items():
            content = content.replace(key, value)
        ctx.file(package + "/BUILD", content)
    for path, content in ctx.attr.files.items():
        for key, value in substitutions.items():
            content = content.replace(key, value)
        ctx.file(path, content, executable = path.endswith(".sh"))
    ctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % ctx.name)

system_library = repository_rule(
    implementation = _system_library_impl,
    attrs = {
        "build_file": attr.label(mandatory = True, allow_single_file = True),
        "packages": attr.string_dict(doc = "Extra BUILD files: package path -> content."),
        "files": attr.string_dict(doc = "Extra files: path -> content (%{PREFIX} is substituted)."),
        "include_dirs": attr.string_list(doc = "Folders under <prefix>/include to expose."),
        "required_libs": attr.string_list(doc = "Library names (without lib and suffix) that must exist."),
        "debian_packages": attr.string_list(),
        "prefix_env": attr.string(default = "MAGI_SYSROOT"),
        "default_prefix": attr.string(default = "/usr"),
    },
    environ = ["MAGI_SYSROOT"],
    local = True,
)
