"""Abseil targets exposed by the system overlay, keyed by their upstream package.

Each entry maps an upstream target name to the shared libraries (libabsl_<name>.so)
it needs. Shared libraries carry their own dependencies (DT_NEEDED), so only the
libraries whose symbols the target's headers reference are listed.
"""

ABSL_PACKAGES = {
    "absl/algorithm": {"algorithm": [], "container": []},
    "absl/base": {
        "base": ["base", "raw_logging_internal", "spinlock_wait", "log_severity"],
        "core_headers": [],
        "log_severity": ["log_severity"],
    },
    "absl/cleanup": {"cleanup": []},
    "absl/container": {
        "btree": [],
        "fixed_array": [],
        "flat_hash_map": ["raw_hash_set", "hash", "city", "low_level_hash"],
        "flat_hash_set": ["raw_hash_set", "hash", "city", "low_level_hash"],
        "inlined_vector": [],
        "node_hash_map": ["raw_hash_set", "hash", "city", "low_level_hash"],
        "node_hash_set": ["raw_hash_set", "hash", "city", "low_level_hash"],
    },
    "absl/debugging": {
        "failure_signal_handler": ["failure_signal_handler", "examine_stack", "stacktrace", "symbolize"],
        "stacktrace": ["stacktrace"],
        "symbolize": ["symbolize"],
    },
    "absl/flags": {
        "flag": ["flags_internal", "flags_marshalling", "flags_reflection", "flags_config",
                 "flags_commandlineflag", "flags_commandlineflag_internal", "flags_private_handle_accessor",
                 "flags_program_name"],
        "parse": ["flags_parse", "flags_usage", "flags_usage_internal", "flags_internal", "flags_reflection"],
        "usage": ["flags_usage", "flags_usage_internal"],
    },
    "absl/functional": {"any_invocable": [], "bind_front": [], "function_ref": []},
    "absl/hash": {"hash": ["hash", "city", "low_level_hash"]},
    "absl/memory": {"memory": []},
    "absl/numeric": {"bits": [], "int128": ["int128"]},
    "absl/random": {
        "distributions": ["random_distributions"],
        "random": ["random_distributions", "random_seed_sequences", "random_internal_pool_urbg",
                   "random_internal_randen", "random_internal_randen_hwaes", "random_internal_randen_hwaes_impl",
                   "random_internal_randen_slow", "random_internal_platform", "random_internal_seed_material",
                   "random_seed_gen_exception"],
    },
    "absl/status": {"status": ["status", "cord", "cord_internal", "cordz_info", "cordz_functions", "strerror"], "statusor": ["statusor", "status"]},
    "absl/strings": {
        "cord": ["cord", "cord_internal", "cordz_info", "cordz_functions"],
        "str_format": ["str_format_internal", "strings"],
        "strings": ["strings", "strings_internal", "throw_delegate", "int128", "raw_logging_internal"],
    },
    "absl/synchronization": {"synchronization": ["synchronization", "graphcycles_internal", "time", "time_zone", "base", "spinlock_wait", "malloc_internal"]},
    "absl/time": {"time": ["time", "time_zone", "civil_time", "int128"]},
    "absl/types": {
        "optional": ["bad_optional_access"],
        "span": [],
        "variant": ["bad_variant_access"],
    },
    "absl/utility": {"utility": []},
}

def absl_package_builds():
    """Returns {package: BUILD content} for the overlay."""
    builds = {}
    for package, targets in ABSL_PACKAGES.items():
        lines = ['package(default_visibility = ["//visibility:public"])', ""]
        for name, libs in sorted(targets.items()):
            lines.append("cc_library(")
            lines.append('    name = "%s",' % name)
            lines.append('    deps = ["//:headers"],')
            lines.append("    linkopts = %s," % repr(["-labsl_" + lib for lib in libs]))
            lines.append(")")
            lines.append("")
        builds[package] = "\n".join(lines)
    return builds

def absl_required_libs():
    libs = {}
    for targets in ABSL_PACKAGES.values():
        for needed in targets.values():
            for lib in needed:
                libs["absl_" + lib] = True
    return sorted(libs.keys())
