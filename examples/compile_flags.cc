#include "examples/compile_flags.h"

#include <cmath>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "magi/base/numbers.h"

ABSL_FLAG(std::string, backend, "interpreter",
          "The primary backend, which runs the whole graph (see `magi registry`), e.g. interpreter, nccl_stream, "
          "nccl_stream{cuda_graph=true}");
ABSL_FLAG(std::string, passes, "",
          "A pass pipeline to run on the graph instead of the search, e.g. "
          "\"bucket-collectives{max_mb=64},schedule-overlap{prefetch=2}\"");
ABSL_FLAG(double, memory_budget_gb, 0,
          "Memory budget per rank in GB: the strategy search picks bucketing, prefetch, resharding and recompute so "
          "the graph's predicted peak fits (0: no search); on CUDA, PyTorch's GEMM workspaces (32 MiB per stream on "
          "an H200; the summary's predicted_library_device_bytes) come on top");
ABSL_FLAG(double, budget_gb, 0, "Deprecated: the old name of --memory_budget_gb (give one of them)");
ABSL_FLAG(std::string, device_profile, "",
          "Cost model device profile (cpu, h200 or a .profile file; default: cpu, or h200 with --device=cuda)");
ABSL_FLAG(std::string, calibration, "auto",
          "The cost model's measured op times: auto (measure the graph's kernels that the cache "
          "${MAGI_CACHE_DIR:-~/.cache/magi}/calibration/ lacks, with short micro-runs on every rank, and cache them), "
          "none (the device profile's formulas alone), or a CSV from examples:train --calibration_out");
ABSL_FLAG(std::string, partition_backends, "",
          "Comma-separated backends that take the parts of the graph they accept, e.g. inductor or "
          "inductor{jobs=4},elementwise (see docs/backends.md)");
ABSL_FLAG(int, partition_min_nodes, 1, "Runs of fewer nodes stay with the primary backend");
ABSL_FLAG(int, partition_max_nodes, 0,
          "Longer runs are split into partitions of at most this many nodes (0: unbounded); bounds what one "
          "generated program costs to compile");
ABSL_FLAG(bool, partition_align_collectives, true,
          "Before partitioning, move collectives that sit inside fusible chains to the nearest GEMM or attention "
          "(pass align-collectives; docs/backends.md)");
ABSL_FLAG(bool, partition_recompute_fusible, true,
          "Before partitioning, recompute in the backward the elementwise activations whose inputs are saved anyway "
          "(silu, RMSNorm's normalized x), so the fused kernels neither write nor keep them (pass recompute-fusible; "
          "docs/backends.md)");
ABSL_FLAG(bool, deterministic, false,
          "Deterministic mode (docs/deterministic.md): bitwise-identical results run after run on the same hardware "
          "kind and world size; prints the plan hash");
ABSL_FLAG(std::string, plan_hash, "",
          "Fail unless the compiled plan has this hash (e.g. the one an earlier --deterministic run printed)");

namespace magi {

namespace {

// The budget flag given: --memory_budget_gb, else its deprecated alias --budget_gb.
std::pair<const char*, double> BudgetFlag() {
  const double alias = absl::GetFlag(FLAGS_budget_gb);
  if (alias != 0 && absl::GetFlag(FLAGS_memory_budget_gb) == 0) return {"budget_gb", alias};
  return {"memory_budget_gb", absl::GetFlag(FLAGS_memory_budget_gb)};
}

}  // namespace

absl::Status ValidateCompileFlags() {
  if (absl::GetFlag(FLAGS_budget_gb) != 0 && absl::GetFlag(FLAGS_memory_budget_gb) != 0) {
    return absl::InvalidArgumentError(
        "--budget_gb is the deprecated name of --memory_budget_gb: give --memory_budget_gb alone");
  }
  const auto [name, budget] = BudgetFlag();
  if (!std::isfinite(budget) || budget < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, "=", budget, ": expected a non-negative, finite number"));
  }
  if (!BytesFromDouble(budget * 1e9)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, "=", budget, ": more bytes than an int64 holds"));
  }
  if (budget > 0 && !absl::GetFlag(FLAGS_passes).empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--passes and --", name,
                                                   " both choose the pipeline: give one (a memory budget searches "
                                                   "for it)"));
  }
  if (absl::GetFlag(FLAGS_calibration).empty()) {
    return absl::InvalidArgumentError("--calibration is empty: give auto, none or a calibration table (CSV) path");
  }
  if (absl::GetFlag(FLAGS_partition_min_nodes) < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--partition_min_nodes=", absl::GetFlag(FLAGS_partition_min_nodes), ": must be >= 1"));
  }
  if (absl::GetFlag(FLAGS_partition_max_nodes) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--partition_max_nodes=", absl::GetFlag(FLAGS_partition_max_nodes), ": must be >= 0"));
  }
  int depth = 0;
  for (char c : absl::GetFlag(FLAGS_partition_backends)) {
    depth += c == '{' ? 1 : c == '}' ? -1 : 0;
    if (depth < 0) break;
  }
  if (depth != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--partition_backends=", absl::GetFlag(FLAGS_partition_backends),
                                                   ": unbalanced braces"));
  }
  return absl::OkStatus();
}

std::vector<std::string> SplitBackendSpecs(const std::string& specs) {
  std::vector<std::string> result;
  std::string spec;
  int depth = 0;
  for (char c : specs + ",") {
    depth += c == '{' ? 1 : c == '}' ? -1 : 0;
    if (c == ',' && depth == 0) {
      if (!spec.empty()) result.push_back(spec);
      spec.clear();
    } else {
      spec += c;
    }
  }
  return result;
}

int64_t MemoryBudgetBytesFromFlags() { return BytesFromDouble(BudgetFlag().second * 1e9).value_or(0); }

CompileOptions CompileOptionsFromFlags(const std::string& device) {
  CompileOptions options;
  options.backend = absl::GetFlag(FLAGS_backend);
  options.optimization.passes = absl::GetFlag(FLAGS_passes);
  options.optimization.memory_budget_bytes = MemoryBudgetBytesFromFlags();
  options.cost_model.device_profile = absl::GetFlag(FLAGS_device_profile).empty()
                                          ? (device == "cuda" ? "h200" : "cpu")
                                          : absl::GetFlag(FLAGS_device_profile);
  options.partitioning.backends = SplitBackendSpecs(absl::GetFlag(FLAGS_partition_backends));
  options.partitioning.min_nodes = absl::GetFlag(FLAGS_partition_min_nodes);
  options.partitioning.max_nodes = absl::GetFlag(FLAGS_partition_max_nodes);
  options.partitioning.align_collectives = absl::GetFlag(FLAGS_partition_align_collectives);
  options.partitioning.recompute_fusible = absl::GetFlag(FLAGS_partition_recompute_fusible);
  options.deterministic = absl::GetFlag(FLAGS_deterministic);
  options.expected_plan_hash = absl::GetFlag(FLAGS_plan_hash);
  return options;
}

std::string CalibrationFromFlags() { return absl::GetFlag(FLAGS_calibration); }

}  // namespace magi
