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

class DecodeKernelRunner {
 public:
  // InvalidArgument when the program does not fit the kernel (PackProgram) or has more SMs
  // than `device` (a CUDA device); FailedPrecondition when the kernel cannot keep one block
  // resident per SM there.
  // `stage_inputs`: stage each tile's input vectors in shared memory where they fit (the
  // default), else read them from L2 for every row (the kernel's first form, kept to compare).
  static absl::StatusOr<std::unique_ptr<DecodeKernelRunner>> Create(const Program& program, at::Device device,
                                                                    bool stage_inputs = true);

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

 private:
  DecodeKernelRunner() = default;
  absl::Status CheckTensors(const DecodeTensors& tensors) const;

  Program program_;
  at::Device device_ = at::Device(at::kCUDA);
  at::Tensor instructions_, queue_begin_, queue_, counters_, block_steps_, layers_, timeline_;
  std::vector<KernelLayer> layers_on_device_;  // what layers_ holds
  at::Tensor hidden_, qkv_, attention_, activation_, logits_, next_token_;
  int64_t steps_run_ = 0;
  int32_t staged_floats_ = 0;
};

}  // namespace magi::megakernel

#endif  // MAGI_BACKEND_MEGAKERNEL_KERNEL_RUNNER_H_
