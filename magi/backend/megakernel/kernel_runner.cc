#include "magi/backend/megakernel/kernel_runner.h"

#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "magi/backend/megakernel/device_program.h"

namespace magi::megakernel {
namespace {

// `count` records copied into a new tensor on `device` (a blocking copy: called outside captures).
template <typename T>
at::Tensor ToDevice(const T* data, size_t count, at::Device device) {
  at::Tensor bytes = at::empty({static_cast<int64_t>(count * sizeof(T))}, at::TensorOptions().dtype(at::kByte));
  if (count > 0) std::memcpy(bytes.data_ptr(), data, count * sizeof(T));
  return bytes.to(device);
}

absl::Status CudaStatus(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

bool SameLayers(const std::vector<KernelLayer>& a, const std::vector<KernelLayer>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(KernelLayer)) == 0);
}

}  // namespace

absl::StatusOr<std::unique_ptr<DecodeKernelRunner>> DecodeKernelRunner::Create(const Program& program,
                                                                                at::Device device,
                                                                                const DecodeKernelOptions& options) {
  if (!device.is_cuda()) return absl::InvalidArgumentError(absl::StrCat("the decode kernel runs on CUDA, not ", device.str()));
  const int index = device.has_index() ? device.index() : at::cuda::current_device();
  const int device_sms = at::cuda::getDeviceProperties(index)->multiProcessorCount;
  if (program.options.num_sms > device_sms) {
    return absl::InvalidArgumentError(absl::StrCat("the program has ", program.options.num_sms, " SMs' queues; cuda:",
                                                   index, " has ", device_sms, " SMs"));
  }
  absl::StatusOr<DeviceProgram> packed = PackProgram(program);
  if (!packed.ok()) return packed.status();
  if (options.tensor_cores && !options.stage_inputs) {
    return absl::InvalidArgumentError(
        "the decode kernel's tensor cores take staged inputs: stage_inputs=false with tensor_cores=true");
  }
  // The tensor cores read the weights with plain loads (a ring slot's rows at a 2 x K stride
  // would conflict in shared memory).
  const bool stream_weights = options.stream_weights && !options.tensor_cores;
  // A slot holds at least one row of the widest matrix (the down projection's, or a q/k/v row).
  const int64_t widest_row_bytes = 2 * std::max(program.model.dim, program.model.ffn_hidden);
  int64_t slot_bytes = options.ring_slot_bytes;
  if (slot_bytes == 0) slot_bytes = std::max<int64_t>(32 * 1024, (widest_row_bytes + 127) / 128 * 128);
  if (stream_weights && (slot_bytes % 128 != 0 || slot_bytes < widest_row_bytes || options.max_ring_slots < 2 ||
                         options.max_ring_slots > kMaxRingSlots)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the weight ring takes slots of a multiple of 128 bytes holding a row of the widest matrix (", widest_row_bytes,
        " bytes) and 2..", kMaxRingSlots, " slots; given ", options.ring_slot_bytes, " bytes, at most ",
        options.max_ring_slots, " slots"));
  }
  KernelArgs layout{};
  {
    const c10::DeviceGuard guard(at::Device(at::kCUDA, index));
    int most = 0;
    absl::Status room = CudaStatus(DecodeStepMaxDynamicBytes(&most), "querying the decode kernel's shared memory");
    if (!room.ok()) return room;
    const int64_t needed = program.model.batch * std::max(program.model.dim, program.model.ffn_hidden);
    if (options.stage_inputs && needed * static_cast<int64_t>(sizeof(float)) <= most) {
      layout.staged_floats = static_cast<int32_t>(needed);
    } else if (options.tensor_cores) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the decode kernel's tensor cores need the inputs staged: ", needed * sizeof(float),
          " bytes of shared memory (batch x the widest matrix's width, fp32), cuda:", index, " gives ", most));
    }
    // The ring takes what the staged inputs leave, if that is two slots or more.
    const int64_t offset = (layout.staged_floats * static_cast<int64_t>(sizeof(float)) + 127) / 128 * 128;
    const int64_t slots = std::min<int64_t>(options.max_ring_slots, (most - offset) / slot_bytes);
    if (stream_weights && slots >= 2) {
      layout.ring_slots = static_cast<int32_t>(slots);
      layout.ring_slot_bytes = static_cast<int32_t>(slot_bytes);
      layout.ring_offset_bytes = static_cast<int32_t>(offset);
    }
    int blocks = 0;
    absl::Status occupancy = CudaStatus(DecodeStepBlocksPerSm(DecodeStepDynamicBytes(layout), &blocks),
                                        "querying the decode kernel's occupancy");
    if (!occupancy.ok()) return occupancy;
    if (blocks < 1) {
      return absl::FailedPreconditionError(
          absl::StrCat("the decode kernel cannot keep a block resident per SM on cuda:", index));
    }
  }
  auto runner = std::unique_ptr<DecodeKernelRunner>(new DecodeKernelRunner());
  runner->program_ = program;
  runner->staged_floats_ = layout.staged_floats;
  runner->ring_slots_ = layout.ring_slots;
  runner->ring_slot_bytes_ = layout.ring_slot_bytes;
  runner->ring_offset_bytes_ = layout.ring_offset_bytes;
  runner->tensor_cores_ = options.tensor_cores;
  runner->device_ = at::Device(at::kCUDA, index);
  const at::Device d = runner->device_;
  runner->instructions_ = ToDevice(packed->instructions.data(), packed->instructions.size(), d);
  runner->queue_begin_ = ToDevice(packed->queue_begin.data(), packed->queue_begin.size(), d);
  runner->queue_ = ToDevice(packed->queue.data(), packed->queue.size(), d);
  const at::TensorOptions i32 = at::TensorOptions().dtype(at::kInt).device(d);
  runner->counters_ = at::zeros({std::max<int32_t>(packed->num_counters, 1)}, i32);
  runner->block_steps_ = at::zeros({program.options.num_sms}, i32);
  runner->timeline_ = at::zeros({static_cast<int64_t>(program.instructions.size()), 3},
                                at::TensorOptions().dtype(at::kLong).device(d));
  const DecodeModel& m = program.model;
  const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat).device(d);
  runner->hidden_ = at::zeros({m.batch, m.dim}, f32);
  runner->qkv_ = at::zeros({m.batch, m.qkv_rows()}, f32);
  runner->attention_ = at::zeros({m.batch, m.dim}, f32);
  runner->activation_ = at::zeros({m.batch, m.ffn_hidden}, f32);
  runner->logits_ = at::zeros({m.batch, m.vocab}, f32);
  runner->attention_partials_ = at::zeros({m.batch, m.n_heads * program.attention_splits * (m.head_dim + 2)}, f32);
  runner->next_token_ = at::zeros({m.batch}, at::TensorOptions().dtype(at::kLong).device(d));
  return runner;
}

absl::Status DecodeKernelRunner::CheckTensors(const DecodeTensors& t) const {
  // Runs every step: no allocation unless a tensor is refused (then the message is built).
  const DecodeModel& m = program_.model;
  // `rows16`: the kernel reads the tensor's rows 16 bytes at a time (vector loads, bulk copies:
  // the matrices and the caches), so it starts at a multiple of 16 bytes.
  auto check = [&](const at::Tensor& tensor, const char* name, int layer, at::ScalarType dtype,
                   std::initializer_list<int64_t> sizes, bool rows16 = false) -> absl::Status {
    const bool aligned = !tensor.defined() || !rows16 || reinterpret_cast<uintptr_t>(tensor.data_ptr()) % 16 == 0;
    if (tensor.defined() && tensor.scalar_type() == dtype && tensor.device() == device_ && tensor.is_contiguous() &&
        tensor.sizes() == at::IntArrayRef(sizes) && aligned) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "the decode kernel takes ", name, layer >= 0 ? absl::StrCat(" of layer ", layer) : "", " as a contiguous ",
        rows16 ? "16-byte aligned " : "", c10::toString(dtype), "[", absl::StrJoin(sizes, ","),
        "] on ", device_.str(), "; given ",
        tensor.defined()
            ? absl::StrCat(c10::toString(tensor.scalar_type()), "[", absl::StrJoin(tensor.sizes(), ","), "] on ",
                           tensor.device().str(), tensor.is_contiguous() ? "" : ", strided",
                           aligned ? "" : ", at an address not a multiple of 16")
            : "nothing"));
  };
  const at::ScalarType bf16 = at::kBFloat16;
  const int64_t half = m.head_dim / 2, rope_rows = t.rope_cos.defined() ? t.rope_cos.size(0) : 0;
  for (absl::Status status : {check(t.tokens, "the tokens", -1, at::kLong, {m.batch, 1}),
                              check(t.positions, "the positions", -1, at::kLong, {m.batch}),
                              check(t.rope_cos, "the rope cosines", -1, bf16, {rope_rows, half}),
                              check(t.rope_sin, "the rope sines", -1, bf16, {rope_rows, half}),
                              check(t.embedding, "the embedding", -1, bf16, {m.vocab, m.dim}),
                              check(t.final_norm, "the final norm", -1, bf16, {m.dim}),
                              check(t.lm_head, "the LM head", -1, bf16, {m.vocab, m.dim}, true)}) {
    if (!status.ok()) return status;
  }
  if (rope_rows < m.window) {
    return absl::InvalidArgumentError(
        absl::StrCat("the rope tables have ", rope_rows, " positions; the window is ", m.window));
  }
  if (static_cast<int64_t>(t.layers.size()) != m.n_layers) {
    return absl::InvalidArgumentError(absl::StrCat(t.layers.size(), " layers given, the program has ", m.n_layers));
  }
  for (size_t i = 0; i < t.layers.size(); ++i) {
    const DecodeTensors::Layer& layer = t.layers[i];
    const int l = static_cast<int>(i);
    for (absl::Status status :
         {check(layer.attention_norm, "the attention norm", l, bf16, {m.dim}),
          check(layer.qkv, "the q/k/v weight", l, bf16, {m.qkv_rows(), m.dim}, true),
          check(layer.o, "the output projection", l, bf16, {m.dim, m.dim}, true),
          check(layer.ffn_norm, "the FFN norm", l, bf16, {m.dim}),
          check(layer.gate_up, "the gate/up weight", l, bf16, {2 * m.ffn_hidden, m.dim}, true),
          check(layer.down, "the down projection", l, bf16, {m.dim, m.ffn_hidden}, true),
          check(layer.key_cache, "the key cache", l, bf16, {m.batch, m.n_kv_heads, m.window, m.head_dim}, true),
          check(layer.value_cache, "the value cache", l, bf16, {m.batch, m.n_kv_heads, m.window, m.head_dim}, true)}) {
      if (!status.ok()) return status;
    }
  }
  return absl::OkStatus();
}

absl::Status DecodeKernelRunner::Step(const DecodeTensors& t) {
  if (absl::Status status = CheckTensors(t); !status.ok()) return status;
  const c10::DeviceGuard guard(device_);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(device_.index()).stream();
  std::vector<KernelLayer> layers;
  for (const DecodeTensors::Layer& l : t.layers) {
    layers.push_back({l.attention_norm.data_ptr(), l.qkv.data_ptr(), l.o.data_ptr(), l.ffn_norm.data_ptr(),
                      l.gate_up.data_ptr(), l.down.data_ptr(), l.key_cache.data_ptr(), l.value_cache.data_ptr(),
                      static_cast<float>(l.attention_eps), static_cast<float>(l.ffn_eps)});
  }
  if (!layers_.defined() || !SameLayers(layers, layers_on_device_)) {
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (absl::Status status = CudaStatus(cudaStreamIsCapturing(stream, &capturing), "cudaStreamIsCapturing");
        !status.ok()) {
      return status;
    }
    if (capturing != cudaStreamCaptureStatusNone) {
      return absl::FailedPreconditionError(
          "the decode step's weights or caches moved while a CUDA graph captured it: run a step outside the "
          "capture first, on the tensors the graph will use");
    }
    layers_ = ToDevice(layers.data(), layers.size(), device_);
    layers_on_device_ = std::move(layers);
  }
  const DecodeModel& m = program_.model;
  KernelArgs args{};
  args.batch = static_cast<int32_t>(m.batch);
  args.dim = static_cast<int32_t>(m.dim);
  args.n_heads = static_cast<int32_t>(m.n_heads);
  args.n_kv_heads = static_cast<int32_t>(m.n_kv_heads);
  args.head_dim = static_cast<int32_t>(m.head_dim);
  args.ffn = static_cast<int32_t>(m.ffn_hidden);
  args.vocab = static_cast<int32_t>(m.vocab);
  args.window = static_cast<int32_t>(m.window);
  args.tokens = t.tokens.data_ptr<int64_t>();
  args.positions = t.positions.data_ptr<int64_t>();
  args.rope_cos = t.rope_cos.data_ptr();
  args.rope_sin = t.rope_sin.data_ptr();
  args.embedding = t.embedding.data_ptr();
  args.final_norm = t.final_norm.data_ptr();
  args.lm_head = t.lm_head.data_ptr();
  args.final_eps = static_cast<float>(t.final_eps);
  args.layers = static_cast<const KernelLayer*>(layers_.data_ptr());
  args.hidden = hidden_.data_ptr<float>();
  args.qkv = qkv_.data_ptr<float>();
  args.attention = attention_.data_ptr<float>();
  args.activation = activation_.data_ptr<float>();
  args.logits = logits_.data_ptr<float>();
  args.attention_partials = attention_partials_.data_ptr<float>();
  args.attention_splits = program_.attention_splits;
  args.next_token = next_token_.data_ptr<int64_t>();
  args.instructions = static_cast<const DeviceInstruction*>(instructions_.data_ptr());
  args.queue_begin = static_cast<const int32_t*>(queue_begin_.data_ptr());
  args.queue = static_cast<const int32_t*>(queue_.data_ptr());
  args.counters = reinterpret_cast<uint32_t*>(counters_.data_ptr<int32_t>());
  args.block_steps = reinterpret_cast<uint32_t*>(block_steps_.data_ptr<int32_t>());
  args.timeline = reinterpret_cast<uint64_t*>(timeline_.data_ptr<int64_t>());
  args.staged_floats = staged_floats_;
  args.ring_slots = ring_slots_;
  args.ring_slot_bytes = ring_slot_bytes_;
  args.ring_offset_bytes = ring_offset_bytes_;
  args.tensor_cores = tensor_cores_ ? 1 : 0;
  if (absl::Status status =
          CudaStatus(LaunchDecodeStep(args, program_.options.num_sms, stream), "launching the decode kernel");
      !status.ok()) {
    return status;
  }
  ++steps_run_;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<InstructionTimes>> DecodeKernelRunner::LastStepTimeline() const {
  if (steps_run_ == 0) return absl::FailedPreconditionError("the decode kernel has run no step yet");
  const c10::DeviceGuard guard(device_);
  // The step may run on any stream (a CUDA graph's replay included): wait for the device.
  if (absl::Status status = CudaStatus(cudaDeviceSynchronize(), "waiting for the decode step"); !status.ok()) {
    return status;
  }
  const at::Tensor host = timeline_.cpu();
  const int64_t* records = host.data_ptr<int64_t>();
  std::vector<InstructionTimes> times(program_.instructions.size());
  for (size_t i = 0; i < times.size(); ++i) {
    times[i] = {static_cast<uint64_t>(records[3 * i]), static_cast<uint64_t>(records[3 * i + 1]),
                static_cast<uint64_t>(records[3 * i + 2])};
  }
  return times;
}

}  // namespace magi::megakernel
