// Runs decode steps of one instruction program with the persistent kernel (decode_kernel.h):
// holds the program's device copy, its counters and the fp32 scratch, and launches one step
// on the caller's current CUDA stream. Built with --config=cuda only.
//
//   absl::StatusOr<std::unique_ptr<DecodeKernelRunner>> runner = DecodeKernelRunner::Create(program, device);
//   MAGI_RETURN_IF_ERROR((*runner)->Step(tensors));   // tensors: BindDecodeTensors on the device
//   (*runner)->logits();      // f32 [batch, vocab], valid once the stream reaches it
//   (*runner)->next_token();  // i64 [batch]
//
// A step issues one launch and no host synchronisation, so it may be captured into a CUDA
// graph: the step count lives in device memory. The tensors' addresses are copied to the
// device when they change; they may not change while the stream is capturing.
#ifndef MAGI_BACKEND_MEGAKERNEL_KERNEL_RUNNER_H_
#define MAGI_BACKEND_MEGAKERNEL_KERNEL_RUNNER_H_

#include <memory>
#include <vector>

#include <ATen/ATen.h>

#include "absl/status/statusor.h"
#include "magi/backend/megakernel/decode_kernel.h"
#include "magi/backend/megakernel/instruction_program.h"
#include "magi/backend/megakernel/program_timeline.h"
#include "magi/backend/megakernel/reference_executor.h"

namespace magi::megakernel {

// How the kernel reads a tile's inputs and weights. The defaults are the design's choice; what each
// costs on an H100 is in docs/benchmarks.md (generate_1b runs 4, 5, 7, 9).
struct DecodeKernelOptions {
  // Stage each tile's input vectors in shared memory where they fit, else read them from L2
  // for every row (the kernel's first form, kept to compare).
  bool stage_inputs = true;
  // Stream the weights through a ring of shared-memory slots that the bulk-copy engine fills
  // ahead, where at least two slots fit beside the staged inputs; else plain vector loads.
  bool stream_weights = true;
  // A slot's bytes: 0 picks 32 KiB, or one row of the widest matrix when that is larger; else a
  // multiple of 128 holding at least such a row.
  int ring_slot_bytes = 0;
  // The most slots the ring takes (2..kMaxRingSlots); fewer where shared memory runs out.
  int max_ring_slots = kMaxRingSlots;
  // Multiply the matrix tiles on the tensor cores (mma.m16n8k16), their inputs staged in bf16
  // (as PyTorch's bf16 activations are), the weights read with plain loads (no ring). Needs
  // stage_inputs.
  bool tensor_cores = false;
};

class DecodeKernelRunner {
 public:
  // InvalidArgument when the program does not fit the kernel (PackProgram), has more SMs than
  // `device` (a CUDA device) or `options` are out of range; FailedPrecondition when the kernel
  // cannot keep one block resident per SM there.
  static absl::StatusOr<std::unique_ptr<DecodeKernelRunner>> Create(const Program& program, at::Device device,
                                                                    const DecodeKernelOptions& options = {});

  // One decode step: reads the tokens and positions, writes the step's keys and values into
  // the caches, and the logits and next tokens into the runner's own tensors. InvalidArgument
  // naming the tensor when one is not bf16 (int64 for tokens and positions), contiguous, on
  // the runner's device and of the program's shape.
  absl::Status Step(const DecodeTensors& tensors);

  const at::Tensor& logits() const { return logits_; }
  const at::Tensor& next_token() const { return next_token_; }
  int64_t steps_run() const { return steps_run_; }
  // The kernel's clock records of the last step that ran (waiting for the device first), in
  // the program's instruction order. FailedPrecondition before any step.
  absl::StatusOr<std::vector<InstructionTimes>> LastStepTimeline() const;
  const Program& program() const { return program_; }
  // Whether the tiles' inputs are staged in shared memory.
  bool stages_inputs() const { return staged_floats_ > 0; }
  // The weight ring's slots (0: the weights are read with plain loads) and their bytes.
  int ring_slots() const { return ring_slots_; }
  int ring_slot_bytes() const { return ring_slot_bytes_; }
  bool uses_tensor_cores() const { return tensor_cores_; }

 private:
  DecodeKernelRunner() = default;
  absl::Status CheckTensors(const DecodeTensors& tensors) const;

  Program program_;
  at::Device device_ = at::Device(at::kCUDA);
  at::Tensor instructions_, queue_begin_, queue_, counters_, block_steps_, layers_, timeline_;
  std::vector<KernelLayer> layers_on_device_;  // what layers_ holds
  at::Tensor hidden_, qkv_, attention_, activation_, logits_, next_token_, attention_partials_;
  int64_t steps_run_ = 0;
  int32_t staged_floats_ = 0;
  int32_t ring_slots_ = 0, ring_slot_bytes_ = 0, ring_offset_bytes_ = 0;
  bool tensor_cores_ = false;
};

}  // namespace magi::megakernel

#endif  // MAGI_BACKEND_MEGAKERNEL_KERNEL_RUNNER_H_
