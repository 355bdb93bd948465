// What the compile driver (compiler.h) is asked to do with a captured step.
#ifndef MAGI_COMPILER_COMPILE_OPTIONS_H_
#define MAGI_COMPILER_COMPILE_OPTIONS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "magi/backend/kernel_calibrator.h"
#include "magi/passes/fsdp/shard_for_fsdp.h"
#include "magi/registry/registry.h"
#include "magi/search/strategy_search.h"

namespace magi {

// How the step graph is optimized after sharding: a pass pipeline, or the strategy
// search under a memory budget (not both).
struct OptimizationOptions {
  // Run first, always (empty: nothing): clean-ups every step benefits from whatever the
  // strategy: the gradient-accumulation copies capture records (elide-copies) and the
  // zero-padded halves autograd adds up for a split such as RoPE's rotate_half
  // (slice-grads-to-cat: one cat instead of two zero-filled buffers and an add; equal
  // values, see slice_grads_to_cat.h).
  std::string canonicalize = "elide-copies,slice-grads-to-cat,dce";
  // A pass pipeline, e.g. "bucket-collectives{max_mb=64},schedule-overlap{prefetch=2}".
  std::string passes;
  // The memory budget (the one field that holds it; examples' --memory_budget_gb, the
  // summaries' memory_budget_bytes). > 0: the strategy search picks the pipeline whose
  // predicted peak fits this many bytes per rank (then `passes` must be empty). Every rank
  // searches its own (identical) graph and finds the same plan.
  int64_t memory_budget_bytes = 0;
  // The search space and effort (read only under a memory budget).
  SearchOptions search;
  // Inference: after canonicalization, linears that read one activation become one matmul
  // against their weights concatenated (concat-matmuls, magi/passes/concat_matmuls.h), and
  // the work that depends only on the weights (those concatenations) moves to a graph of
  // its own, OptimizedStep::prep_graph_name (hoist_weight_preparation.h), which the caller
  // runs once per weight change (CompiledStep::prep_executable) and whose outputs it binds
  // to the step's inputs of the same names. Off by default: a training step changes its
  // weights every step (and its backward reads the gathered weights, which concat-matmuls
  // leaves alone).
  bool weight_preparation = false;
};

// The cost model that the search, auto-recompute and the prediction use: one object.
// Its measured times come from a table the user gives (calibration_csv), or are measured
// (calibration by default, auto_calibration.h: the frontends give a calibrator unless told
// not to), or there are none (the profile's formulas alone). Not both.
struct CostModelOptions {
  std::string device_profile = "cpu";  // a builtin profile (cpu, h200) or a .profile file
  std::string calibration_csv;         // measured op times (CalibrationTable CSV), used as given
  // Measures the step's kernels that the cache lacks (after sharding, and again after the
  // pipeline or search); null: nothing is measured.
  std::shared_ptr<KernelCalibrator> calibrator;
  // Where measured tables are cached per device kind; "": CalibrationCache::DefaultDir()
  // (${MAGI_CACHE_DIR:-~/.cache/magi}/calibration).
  std::string calibration_cache_dir;
};

// Which backends other than the primary one take parts of the step.
struct PartitionOptions {
  // Partition backend specs in order of preference: each in turn takes the runs of
  // consecutive compute nodes it accepts (GetCapability); what is left stays with the
  // primary backend.
  std::vector<std::string> backends;
  // Options added to a partition backend's spec, by backend name (values the spec syntax
  // cannot carry, such as paths: {"inductor", {{"python", "/usr/bin/python3"}}}).
  std::map<std::string, ComponentOptions> backend_options;
  int min_nodes = 1;  // shorter runs stay with the primary backend
  // Longer runs are split (0: no limit): bounds what one partition costs to compile (a
  // backend that generates code, such as inductor, compiles each partition as one program).
  int max_nodes = 0;
  // Before the first partition backend cuts the step, move collectives that sit inside
  // chains it could fuse to the nearest kernel boundary (magi/passes/align_collectives.h):
  // fewer, longer partitions and no activation written and read back at the cut. Only the
  // first partition backend's view counts (what it declines are the boundaries); the
  // prediction is made again after the moves, and under a memory budget moves that would
  // break it are not made.
  bool align_collectives = true;
  // Then recompute in the backward the elementwise activations whose operands are saved
  // anyway and that only feed ops the backend fuses (magi/passes/recompute_fusible.h): the
  // fused kernels neither write nor keep them (the 953M step on an H200: 2.6 GB less peak,
  // docs/benchmarks.md, the 953M step on one H200). Only what the first backend accepts both ways is
  // recomputed (a copy still runs as a kernel of its own where the partitioner cuts its
  // run short: min_nodes, max_nodes, a fallback), and a rewrite that would raise the
  // planned peak is taken back.
  bool recompute_fusible = true;
  // Print the notes of CompiledStep (what each backend declined, fallbacks) to stderr.
  bool log = true;
};

struct CompileOptions {
  // FSDP sharding of the captured step (ShardForFsdp) before anything else; none: the
  // graph is compiled as it is.
  std::optional<FsdpPlan> sharding;
  OptimizationOptions optimization;
  CostModelOptions cost_model;
  PartitionOptions partitioning;
  // The primary backend, which runs the whole step (collectives, calls of partitions), as
  // a spec: "interpreter", "nccl_stream{cuda_graph=true}". Entries of `backend_options`
  // are added to the spec's options.
  std::string backend = "interpreter";
  ComponentOptions backend_options;

  // Deterministic mode (docs/deterministic.md). Its contract: the same hardware kind,
  // world size, model, data and Magi version give bitwise-identical losses, parameters
  // and outputs, run after run. The compiler's part: the plan (buckets, collective
  // sizes, schedule, partitions) is fixed in the compiled module and fingerprinted by
  // its plan hash (plan_hash.h; CompiledStep::plan_hash, printed by the frontends); every
  // backend is told (CompileContext::deterministic) and must refuse what it cannot run
  // reproducibly (no autotuning, no nondeterministic kernels). The process-wide settings
  // that must precede any kernel or communicator (deterministic ATen algorithms,
  // CUBLAS_WORKSPACE_CONFIG, NCCL pinned to Ring/Simple without NVLS) are the runtime's:
  // magi/runtime/deterministic. Off by default: it costs speed.
  bool deterministic = false;
  // > 1: batch-invariant inference. The captured graph computes ONE sequence (data
  // inputs with dim 0 == 1); right after sharding the batch-invariant pass
  // (magi/passes/batch_invariant.h) unrolls it to this many sequences, each running the
  // one-sequence computation, so a sequence's outputs are bitwise the same whatever the
  // batch size and the other sequences. 0 or 1: the graph is compiled as captured.
  int64_t batch_invariant_sequences = 0;
  // Non-empty: the plan hash the compiled step must have (e.g. the one an earlier run
  // printed); another plan fails the compile with FailedPrecondition naming both.
  std::string expected_plan_hash;
};

// The options above that `magi registry` lists (kind "compile-option"), with one line each.
struct CompileOptionDoc {
  const char* name;
  const char* summary;
};
const std::vector<CompileOptionDoc>& DocumentedCompileOptions();

}  // namespace magi

#endif  // MAGI_COMPILER_COMPILE_OPTIONS_H_
