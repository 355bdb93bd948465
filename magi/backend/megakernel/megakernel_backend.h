// "megakernel": the partition backend that runs a whole decode step as ONE persistent kernel
// (docs/megakernel.md).
//
// Capability: all or nothing. A graph that MatchDecodeGraph recognizes as a decode step
// (decode_pattern.h), whose outputs are only the logits, the next tokens and the caches it
// updates in place, is claimed whole (the caches' index_put included:
// UpdatesDonatedInputInPlace); anything else is declined node by node with the reason the
// match gave, so it runs on the next partition backend or the primary one. On CUDA it claims
// bf16 graphs within the kernel's limits (device_records.h), and only in a --config=cuda build.
//
// Compile builds the step's instruction program (instruction_program.h) for the device's SMs,
// proves it (CheckProgram, unless check=false) and returns an executable that runs it: on CUDA
// with the persistent kernel (kernel_runner.h; one launch per step, capturable into a CUDA
// graph), on the CPU instruction by instruction with the reference executor (the same
// program and arithmetic, for tests; not fast).
//
// Options (megakernel{key=value,...}): num_sms (queues of the program; default the CUDA
// device's SM count, 132 on the CPU), tile_rows and attention_splits (ProgramOptions; default
// 0: chosen for the SM count), check (prove each program, default true), stage_inputs (stage
// tiles' inputs in shared memory, default true; false: the kernel's first form),
// stream_weights (read the weights through a shared-memory ring filled ahead by the bulk-copy
// engine, default true; false: plain vector loads), tensor_cores (multiply the tiles on the
// tensor cores, inputs staged in bf16, no ring; default false). The last three are
// DecodeKernelOptions'.
#ifndef MAGI_BACKEND_MEGAKERNEL_MEGAKERNEL_BACKEND_H_
#define MAGI_BACKEND_MEGAKERNEL_MEGAKERNEL_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "magi/backend/backend.h"
#include "magi/backend/megakernel/decode_pattern.h"
#include "magi/backend/megakernel/instruction_program.h"
#include "magi/registry/registry.h"

namespace magi::megakernel {

struct MegakernelOptions {
  int num_sms = 0;  // 0: the device's
  int64_t tile_rows = 0;
  int attention_splits = 0;  // ProgramOptions'
  bool check = true;
  bool stage_inputs = true;    // DecodeKernelOptions'
  bool stream_weights = true;
  bool tensor_cores = false;

  static absl::StatusOr<MegakernelOptions> Parse(const ComponentOptions& options);
};

// Whether this build has the CUDA kernel (--config=cuda).
bool HasCudaKernel();

// The last decode step `executable` ran on CUDA, from the kernel's own clock records: written
// to `path` as a Chrome trace (program_timeline.h); returns SummarizeTimeline's table (with
// `peak_bytes_per_s` > 0, the step's share of it). FailedPrecondition for an executable of
// another backend, or one that has not run a step on CUDA.
absl::StatusOr<std::string> WriteLastStepTimeline(const Executable& executable, const std::string& path,
                                                  double peak_bytes_per_s = 0);

class MegakernelBackend : public Backend {
 public:
  explicit MegakernelBackend(MegakernelOptions options) : options_(options) {}
  absl::string_view name() const override { return "megakernel"; }
  Capability GetCapability(const Module& module, const Graph& graph) const override;
  // The caches' index_put: the kernel writes each step's keys and values into them.
  bool UpdatesDonatedInputInPlace(const Node& node) const override;
  using Backend::Compile;
  absl::StatusOr<std::unique_ptr<Executable>> Compile(const Module& module, const Graph& graph,
                                                      const CompileContext& context) const override;

  // The match of `graph` when this backend claims it; else why not (the reason every node
  // of a declined graph carries).
  absl::StatusOr<DecodeGraphMatch> Claim(const Graph& graph) const;
  // The program options for a graph claimed on `cuda` (or the CPU).
  absl::StatusOr<ProgramOptions> ProgramOptionsFor(bool cuda) const;

 private:
  MegakernelOptions options_;
};

}  // namespace magi::megakernel

#endif  // MAGI_BACKEND_MEGAKERNEL_MEGAKERNEL_BACKEND_H_
