// "inductor": the partition backend that has PyTorch's Inductor generate the kernels of the
// compute between collectives, ahead of time, and runs them from C++ with no Python in the
// training process.
//
//   options.partitioning.backends = {"inductor"};            // magi/compiler: the primary runs the rest
//   options.partitioning.backend_options["inductor"] = {{"python", "/usr/bin/python3"}, {"jobs", "4"}};
//
// Capability: ATen ops that map one to one to torch.ops.aten.* calls (fx_program.h), on
// tensors of static shape and one device (CPU or CUDA), of real dtypes. It declines, each
// with its reason: collectives, waits and other magi:: ops (they stay with the primary
// backend, which runs the schedule), random ops (the primary replays the generator state),
// ops that write memory in place or are data-dependent, dynamic shapes, complex dtypes,
// mixed devices. Where AOTInductor cannot be used at all (a LibTorch without it, such as
// Debian's 1.13; no Python whose torch is this LibTorch's version) it declines every node
// with that reason, so the compile driver leaves the whole step to the primary backend.
//
// Compile (CompileAll: all distinct partitions at once):
//   1. each partition is written as an FX program (fx_program.h);
//   2. its package name is the SHA-256 of that program with canonical value names (so
//      structurally identical partitions share it: input and output dtypes, shapes,
//      strides and devices are in the program), the program format, the LibTorch and
//      Python torch versions and the target (CPU feature flags, CUDA architecture);
//   3. packages not in the cache folder are compiled by aoti_compile.py (embedded in this
//      library) in `jobs` Python processes at once, each exporting with torch.export and
//      compiling with torch._inductor.aoti_compile_and_package; the processes take the
//      partitions from one list, largest first, as they finish the last; packages appear
//      atomically;
//   4. each package is loaded with compat::AotiPackage, single-threaded by default so that
//      a run can be captured in a CUDA graph (nccl_stream's whole-step graph).
// Deterministic mode (CompileContext::deterministic): the packages are compiled with ATen's
// deterministic algorithms on and Inductor's deterministic settings, without autotuning
// (aoti_compile.py), and cached under another key than the default mode's.
// A progress line per compiled partition and a summary with the cold (compiled) and cached
// times go to stderr. A partition whose compile or load fails gets an error Status of its
// own (the compile driver then falls back for that partition and warns).
//
// Run: the device is the tensors' (CPU or CUDA; CUDA runs on the current stream). Inputs
// are checked against the compiled dtypes and sizes; an input whose strides differ from
// the compiled ones is copied into them first (the generated code would read it wrongly).
// Outputs are new tensors; inputs are never written.
//
// Options (ComponentOptions, or environment variables where noted):
//   python     the interpreter (else $MAGI_INDUCTOR_PYTHON, else the Python of the LibTorch
//              in use, else python3 on PATH; see python_env.h)
//   cache_dir  packages and logs (else $MAGI_INDUCTOR_CACHE, else $XDG_CACHE_HOME/magi/inductor,
//              else ~/.cache/magi/inductor)
//   jobs       Python processes compiling at once (default: the hardware threads, at most 8)
//   compile_threads  Inductor's compile workers in each (TORCHINDUCTOR_COMPILE_THREADS;
//              default: the hardware threads / jobs, so the processes share the machine)
//   precompile_headers  true (default): AOTInductor precompiles its wrapper headers once
//              per machine (every process's first package waits for the one that makes
//              it); false: each wrapper compiles them itself (the key does not change:
//              the package is the same program)
//   single_threaded  load packages with run_single_threaded (default true; needed in CUDA graphs)
//   config.NAME  an Inductor setting for every package (torch._inductor.config.NAME, dotted
//              for nested ones: `config.combo_kernels=true`, `config.triton.max_tiles=3`);
//              values true/false, integers, decimals or words. The settings are part of the
//              package key (another setting is another package); aoti_compile.py refuses a
//              NAME this torch lacks, a value of another type than the setting's, and one
//              that deterministic mode sets otherwise.
#ifndef MAGI_BACKEND_INDUCTOR_INDUCTOR_BACKEND_H_
#define MAGI_BACKEND_INDUCTOR_INDUCTOR_BACKEND_H_

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "magi/backend/backend.h"
#include "magi/backend/inductor/python_env.h"
#include "magi/registry/registry.h"

namespace magi::inductor {

struct InductorOptions {
  std::string python;     // "" : chosen as ChoosePython says
  std::string cache_dir;  // "" : the default (see above)
  int jobs = 0;             // 0: the hardware threads, at most 8
  int compile_threads = 0;  // Inductor's compile workers per process; 0: the hardware threads / jobs
  bool precompile_headers = true;  // AOTInductor's shared precompiled header for the C++ wrappers
  bool single_threaded = true;
  // Inductor settings (config.NAME options), by name: ordered, so the package key is too.
  std::map<std::string, std::string> inductor_configs;

  static absl::StatusOr<InductorOptions> FromComponentOptions(const ComponentOptions& options);
};

// Why the inductor backend declines `node`, or "" when it takes it, AOTInductor being
// available. (Availability is the backend's Availability().)
std::string WhyInductorDeclines(const Node& node);

class InductorBackend : public Backend {
 public:
  explicit InductorBackend(InductorOptions options) : options_(std::move(options)) {}

  absl::string_view name() const override { return "inductor"; }
  Capability GetCapability(const Module& module, const Graph& graph) const override;
  // aten::index_put without accumulation (a KV cache's write): the partition writes the
  // donated input in place (torch.export records the mutation; AOTInductor fuses the write).
  bool UpdatesDonatedInputInPlace(const Node& node) const override;
  using Backend::Compile;
  absl::StatusOr<std::unique_ptr<Executable>> Compile(const Module& module, const Graph& graph,
                                                      const CompileContext& context) const override;
  using Backend::CompileAll;
  std::vector<absl::StatusOr<std::unique_ptr<Executable>>> CompileAll(
      const Module& module, const std::vector<const Graph*>& graphs, const CompileContext& context) const override;

  // OK when partitions can be compiled and loaded here; otherwise Unavailable saying why
  // (no AOTInductor in this LibTorch, no suitable Python, an unusable cache folder).
  // Probes the Python once per backend object (a disk-cached probe: see python_env.h).
  absl::Status Availability() const;

  // The interpreter that compiles, as probed ("" when unavailable).
  std::string python() const { return Env().status.ok() ? Env().torch.python : ""; }
  const InductorOptions& options() const { return options_; }
  // The cache folder in use.
  std::string CacheDir() const;

 private:
  struct Environment {
    absl::Status status;
    PythonTorch torch;
    std::string cache_dir;
    std::string script;  // aoti_compile.py, written into the cache folder
    std::string python_how;
  };
  const Environment& Env() const;

  InductorOptions options_;
  mutable std::once_flag env_once_;
  mutable std::optional<Environment> env_;
};

}  // namespace magi::inductor

#endif  // MAGI_BACKEND_INDUCTOR_INDUCTOR_BACKEND_H_
