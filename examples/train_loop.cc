#include "examples/train_loop.h"

#include <torch/cuda.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "magi/compat/kernel_trace.h"
#include "magi/compiler/plan_hash.h"

namespace magi::examples {

absl::Status TrainLoop::Run(FsdpTrainer& trainer, Communicator& all_ranks,
                            const std::function<std::vector<at::Tensor>(int)>& local_batch,
                            const std::function<std::vector<at::Tensor>(int)>& global_batch, EagerReference* reference,
                            const std::function<absl::Status()>& save) {
  const TrainLoopOptions& o = options_;
  const torch::Device& device = o.device;
  eager_ = reference != nullptr;
  const bool tty = isatty(2);
  const bool rank0 = o.rank == 0;
  if (rank0 && device.is_cuda()) energy_.Open(device.index());
  auto start = std::chrono::steady_clock::now();
  for (int step = o.first_step; step < o.steps; ++step) {
    std::vector<at::Tensor> batch = local_batch(step);
    const double step_lr = trainer.next_learning_rate();
    const bool last = step + 1 == o.steps;
    if (last && !o.trace.empty() && rank0) {
      if (absl::Status traced = trainer.TraceNextStep(o.trace); !traced.ok()) return traced;
    }
    if (device.is_cuda()) torch::cuda::synchronize();
    std::unique_ptr<compat::KernelTrace> kernel_trace;
    if (last && !o.kernel_trace.empty() && rank0) {
      energy_.EndWindow();  // the traced step is not timed
      absl::StatusOr<std::unique_ptr<compat::KernelTrace>> started = compat::KernelTrace::Start(device.is_cuda());
      if (!started.ok()) return started.status();
      kernel_trace = *std::move(started);
    }
    if (step == o.first_step) meter_.BeforeSteps(device);
    // A step recorded by Kineto is slowed by the recording: not timed.
    const bool timed = step >= o.first_step + o.untimed_steps && kernel_trace == nullptr;
    if (timed) energy_.BeforeTimedStep();
    auto step_start = std::chrono::steady_clock::now();
    absl::StatusOr<double> local_loss = trainer.Step(batch);
    if (!local_loss.ok()) return local_loss.status();
    if (device.is_cuda()) torch::cuda::synchronize();  // kernels are asynchronous: time their completion
    double step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    if (timed) energy_.AfterTimedStep();
    if (kernel_trace != nullptr) {
      if (absl::Status written = kernel_trace->StopAndSave(o.kernel_trace); !written.ok()) return written;
      std::fprintf(stderr, "wrote the Kineto trace of step %d to %s\n", step + 1, o.kernel_trace.c_str());
    }
    meter_.Record(step_seconds, trainer.last_run_stats(), timed, device);
    if (timed && o.calibrate) {
      absl::Status added = calibration_.AddRun(trainer.graph(), trainer.last_run_stats().node_seconds);
      if (!added.ok()) return added;
    }
    auto mean =
        all_ranks.Start(CollectiveKind::kAllReduce,
                        {at::scalar_tensor(*local_loss, at::TensorOptions().dtype(at::kDouble).device(device))}, "avg");
    if (!mean.ok()) return mean.status();
    auto reduced = (*mean)->Wait();
    if (!reduced.ok()) return reduced.status();
    const double loss = (*reduced)[0].item<double>();
    std::string eager_note;
    if (reference != nullptr) {
      eager_note = reference->Step(global_batch(step), o.clip_grad_norm, step_lr, loss);
      worst_eager_ = reference->worst_relative();
    }
    losses_.push_back(loss);
    curve_.emplace_back(step + 1, loss);
    if (save != nullptr && o.checkpoint_every > 0 && (step + 1) % o.checkpoint_every == 0 && !last) {
      if (absl::Status saved = save(); !saved.ok()) return saved;
    }
    if (rank0) {
      double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      int done = step + 1 - o.first_step;
      std::string line = ProgressLine({step + 1, o.steps, loss, done * static_cast<double>(o.tokens_per_step) / elapsed,
                                       elapsed / done * (o.steps - step - 1), eager_note});
      if (tty) {
        std::fprintf(stderr, "\r%s   ", line.c_str());
      } else if (LogsProgress(step, o.first_step, o.steps, reference != nullptr)) {
        std::fprintf(stderr, "%s\n", line.c_str());
      }
    }
  }
  energy_.EndWindow();
  seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (rank0 && tty) std::fprintf(stderr, "\n");
  return absl::OkStatus();
}

Summary TrainLoop::SummaryOf(const FsdpTrainer& trainer) const {
  Summary s;
  s.initial_loss = losses_.empty() ? 0 : losses_.front();
  s.final_loss = losses_.empty() ? 0 : losses_.back();
  s.steps = options_.steps;
  s.tokens_per_s = (options_.steps - options_.first_step) * static_cast<double>(options_.tokens_per_step) / seconds_;
  s.peak_memory_bytes = meter_.peak_bytes();
  s.predicted_peak_memory_bytes = trainer.prediction().peak_bytes;
  s.step_seconds = meter_.mean_step_seconds();
  s.predicted_step_seconds = trainer.prediction().step_seconds;
  s.pipeline = trainer.applied_pipeline();
  s.tokens_per_step = options_.tokens_per_step;
  s.timed_steps = meter_.timed_steps();
  s.host_seconds_per_step = meter_.mean_host_seconds();
  s.allocator_peak_bytes = meter_.allocator_peak_bytes();
  s.partitions = static_cast<int>(trainer.partitions().size());
  s.plan_hash = trainer.plan_hash();
  const CalibrationStats& stats = trainer.calibration_stats();
  s.calibrated_kernels_measured = stats.measured;
  s.calibrated_kernels_cached = stats.from_cache;
  s.calibrated_kernels_from_steps = stats.from_steps;
  s.calibrated_kernels_pinned = stats.from_pinned;
  s.calibration_table = stats.table_path;
  s.calibration_table_hash = stats.table_hash;
  s.calibration_planned_hash = stats.planned_hash;
  s.timed_step_seconds = meter_.timed_step_seconds();
  s.energy_json = energy_.SummaryJson();
  // What the allocator's peak holds that no plan does: PyTorch's GEMM workspaces on CUDA,
  // as predicted before the first step and as held now. They are kept from their first GEMM
  // on, so what is held now was held at the peak, but for any that --check_eager's
  // reference made after it (its backward's thread, when capture ran on meta). -1: not known.
  s.predicted_library_device_bytes = trainer.predicted_library_device_bytes();
  s.library_device_bytes = trainer.library_device_bytes();
  s.check_eager = eager_;
  s.eager_max_relative_loss_difference = worst_eager_;
  s.losses = losses_;
  return s;
}

CompiledStep CompiledStepOf(const FsdpTrainer& trainer) {
  CompiledStep step;
  step.step_graph = DescribeStepGraph(trainer.graph());
  step.calibration_summary = trainer.calibration_summary();
  step.pipeline = trainer.applied_pipeline();
  step.predicted_step_seconds = trainer.prediction().step_seconds;
  step.predicted_peak_bytes = trainer.prediction().peak_bytes;
  step.plan_hash = trainer.plan_hash();
  step.collectives = DescribeCollectives(trainer.graph());
  return step;
}

}  // namespace magi::examples
