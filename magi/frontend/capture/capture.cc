#include "magi/frontend/capture/capture.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>

#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"
#include "magi/compat/attention.h"
#include "magi/compat/torch_compat.h"
#include "magi/compat/torch_status.h"
#include "magi/frontend/capture/capture_session.h"

namespace magi {
namespace {

constexpr char kRngInput[] = "rng.state";
constexpr char kUpdatedSuffix[] = ".updated";

// Restores the module's .grad tensors when capture ends, however it ends.
class GradientStash {
 public:
  explicit GradientStash(torch::nn::Module& model) {
    for (auto& item : model.named_parameters()) {
      params_.push_back(item.value());
      grads_.push_back(item.value().grad());
      item.value().mutable_grad() = at::Tensor();
    }
  }
  ~GradientStash() {
    for (size_t i = 0; i < params_.size(); ++i) params_[i].mutable_grad() = grads_[i];
  }

 private:
  std::vector<at::Tensor> params_;
  std::vector<at::Tensor> grads_;
};

// Bitwise equality (NaNs included), for checking that capture left a buffer as it was.
bool SameBits(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
  if (a.is_floating_point() && !a.is_complex()) {
    at::ScalarType as_int = a.element_size() == 8 ? at::kLong : a.element_size() == 4 ? at::kInt : at::kShort;
    return at::equal(a.contiguous().view(as_int), b.contiguous().view(as_int));
  }
  return at::equal(a, b);
}

// Copies the module's buffers (small: statistics, tables) and the random generator's
// state when capture starts and puts them back when it ends, however it ends: capture
// has no side effects on the module. Meta buffers hold no data and are skipped.
class BufferAndGeneratorGuard {
 public:
  BufferAndGeneratorGuard(torch::nn::Module& model, at::Generator generator) : generator_(std::move(generator)) {
    c10::impl::ExcludeDispatchKeyGuard exclude(compat::kCaptureKey);
    at::NoGradGuard no_grad;
    std::set<const c10::TensorImpl*> seen;
    for (const auto& item : model.named_buffers()) {
      const at::Tensor& buffer = item.value();
      if (!buffer.defined() || buffer.is_meta() || !seen.insert(buffer.unsafeGetTensorImpl()).second) continue;
      buffers_.push_back({item.key(), buffer, buffer.detach().clone()});
    }
    std::lock_guard<std::mutex> lock(generator_.mutex());
    generator_state_ = generator_.get_state();
  }
  ~BufferAndGeneratorGuard() {
    c10::impl::ExcludeDispatchKeyGuard exclude(compat::kCaptureKey);
    at::NoGradGuard no_grad;
    for (Saved& saved : buffers_) saved.live.detach().copy_(saved.copy);
    std::lock_guard<std::mutex> lock(generator_.mutex());
    generator_.set_state(generator_state_);
  }

  // A buffer that changed although the graph does not return its new value was written
  // by a kernel that does not declare the write: the graph would silently lose it.
  absl::Status CheckWritesAreOutputs(const Graph& graph) const {
    c10::impl::ExcludeDispatchKeyGuard exclude(compat::kCaptureKey);
    for (const Saved& saved : buffers_) {
      if (graph.FindOutput(saved.name + kUpdatedSuffix) >= 0 || SameBits(saved.live, saved.copy)) continue;
      return absl::UnimplementedError(absl::StrCat(
          "the step changed buffer '", saved.name,
          "' through an op that does not declare the write, so the graph cannot return its new value "
          "(Magi knows batch norm's running statistics; report the op)"));
    }
    return absl::OkStatus();
  }

 private:
  struct Saved {
    std::string name;
    at::Tensor live;
    at::Tensor copy;
  };
  std::vector<Saved> buffers_;
  at::Generator generator_;
  at::Tensor generator_state_;
};

at::Generator DefaultGenerator(const at::Tensor& like) {
  if (like.defined() && like.is_cuda()) return at::globalContext().defaultGenerator(like.device());
  return at::detail::getDefaultCPUGenerator();
}

// Parameters and buffers by fully qualified name; a tensor registered under several
// names (tied weights) appears once, under its first name.
std::vector<std::pair<std::string, at::Tensor>> UniqueTensors(const torch::OrderedDict<std::string, at::Tensor>& dict) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  std::set<const c10::TensorImpl*> seen;
  for (const auto& item : dict) {
    if (seen.insert(item.value().unsafeGetTensorImpl()).second) out.emplace_back(item.key(), item.value());
  }
  return out;
}

absl::Status AddModelInputs(CaptureSession& session, torch::nn::Module& model, const std::vector<at::Tensor>& inputs) {
  for (const auto& [name, tensor] : UniqueTensors(model.named_parameters())) {
    MAGI_RETURN_IF_ERROR(session.AddInput(tensor, name, InputRole::kParam).status());
  }
  for (const auto& [name, tensor] : UniqueTensors(model.named_buffers())) {
    MAGI_RETURN_IF_ERROR(session.AddInput(tensor, name, InputRole::kBuffer).status());
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    MAGI_RETURN_IF_ERROR(session.AddInput(inputs[i], absl::StrCat("input.", i), InputRole::kData).status());
  }
  return absl::OkStatus();
}

// Outputs for inputs the step wrote to (buffers updated in place, ...).
absl::Status AddMutatedInputOutputs(CaptureSession& session, torch::nn::Module& model, Graph& graph) {
  std::vector<std::pair<std::string, at::Tensor>> candidates = UniqueTensors(model.named_parameters());
  for (auto& buffer : UniqueTensors(model.named_buffers())) candidates.push_back(std::move(buffer));
  for (const auto& [name, tensor] : candidates) {
    if (!session.WasMutated(tensor)) continue;
    MAGI_ASSIGN_OR_RETURN(Value * value, session.OutputValueOf(tensor));
    if (value != graph.FindValue(name)) graph.AddOutput(absl::StrCat(name, kUpdatedSuffix), value);
  }
  return absl::OkStatus();
}

// Runs `body` under the session; c10::Error thrown by the traced code becomes a Status
// (the session's own, more precise error when it raised it).
absl::Status RunCaptured(CaptureSession& session, const std::function<absl::Status()>& body) {
  absl::Status status;
  MAGI_RETURN_IF_ERROR(compat::CallTorchWith(
      [&] {
        CaptureScope scope(&session);
        status = body();
      },
      [&](const compat::CaughtException& caught) -> absl::Status {
        if (caught.from_torch()) {
          absl::Status recorded = session.status();
          if (!recorded.ok()) return recorded;
        }
        return absl::InternalError(absl::StrCat("the captured code raised: ", caught.message));
      }));
  MAGI_RETURN_IF_ERROR(session.status());
  return status;
}

absl::StatusOr<CapturedGraph> Capture(torch::nn::Module& model, const std::vector<at::Tensor>& inputs,
                                      const CaptureOptions& options, const std::string& graph_name,
                                      const std::function<absl::Status(CaptureSession&, Graph&)>& body) {
  CapturedGraph captured;
  captured.module = std::make_unique<Module>(options.module_name);
  captured.graph_name = graph_name;
  Graph* graph = captured.module->AddGraph(graph_name);
  CaptureSession::Options session_options;
  session_options.device_override = options.device;
  session_options.allow_constants = options.allow_constants;
  CaptureSession session(graph, session_options);
  MAGI_RETURN_IF_ERROR(AddModelInputs(session, model, inputs));

  at::Tensor first = inputs.empty() ? at::Tensor() : inputs[0];
  at::Generator generator = DefaultGenerator(first);
  BufferAndGeneratorGuard restore_buffers(model, generator);
  at::Tensor rng_state;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    rng_state = generator.get_state();
  }
  // Attention on meta computes for the step's device (compat/attention.h): a CUDA step's
  // fused kernel, not the math form PyTorch picks on meta.
  compat::ScopedMetaAttentionDevice attention_device(options.device && options.device->type == DeviceType::kCuda
                                                         ? compat::ToTorchDevice(*options.device)
                                                         : at::Device(at::kMeta));
  absl::Status ran = RunCaptured(session, [&] { return body(session, *graph); });
  session.RestoreWrittenInputs();  // parameters, buffers and data the step wrote
  MAGI_RETURN_IF_ERROR(ran);
  MAGI_RETURN_IF_ERROR(AddMutatedInputOutputs(session, model, *graph));
  MAGI_RETURN_IF_ERROR(restore_buffers.CheckWritesAreOutputs(*graph));
  captured.constants = session.constants();
  captured.recorded_ops = session.recorded_ops();
  if (session.uses_rng()) {
    graph->AddInput(kRngInput, Type::Tensor(TensorType{DType::kUInt8, {rng_state.numel()}}), InputRole::kRng);
    captured.rng_state = rng_state;
  }
  return captured;
}

}  // namespace

absl::StatusOr<CapturedGraph> CaptureTrainingStep(torch::nn::Module& model, const LossFunction& loss_fn,
                                                  const std::vector<at::Tensor>& inputs, const CaptureOptions& options) {
  GradientStash stash(model);
  return Capture(model, inputs, options, "train_step", [&](CaptureSession& session, Graph& graph) -> absl::Status {
    at::Tensor loss = loss_fn(inputs);
    if (!loss.defined() || loss.dim() != 0) {
      return absl::InvalidArgumentError("the loss function must return a scalar (0-d) tensor");
    }
    if (!loss.requires_grad()) {
      return absl::InvalidArgumentError("the loss does not require grad: no parameter contributes to it");
    }
    MAGI_ASSIGN_OR_RETURN(Value * loss_value, session.OutputValueOf(loss));
    graph.AddOutput("loss", loss_value);
    session.set_phase(Phase::kBackward);
    loss.backward();
    for (const auto& [name, param] : UniqueTensors(model.named_parameters())) {
      const at::Tensor& grad = param.grad();
      if (!grad.defined()) continue;  // the parameter did not take part in the loss
      absl::StatusOr<Value*> grad_value = session.OutputValueOf(grad);
      if (!grad_value.ok()) {
        return absl::InternalError(
            absl::StrCat("the gradient of ", name, " was not recorded: ", grad_value.status().message()));
      }
      graph.AddOutput(absl::StrCat(name, ".grad"), *grad_value);
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<CapturedGraph> CaptureForward(torch::nn::Module& model, const ForwardFunction& forward_fn,
                                             const std::vector<at::Tensor>& inputs, const CaptureOptions& options) {
  return Capture(model, inputs, options, "forward", [&](CaptureSession& session, Graph& graph) -> absl::Status {
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> outputs = forward_fn(inputs);
    for (size_t i = 0; i < outputs.size(); ++i) {
      MAGI_ASSIGN_OR_RETURN(Value * value, session.OutputValueOf(outputs[i]));
      graph.AddOutput(absl::StrCat("output.", i), value);
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<at::Tensor>> BindInputs(const CapturedGraph& captured, torch::nn::Module& model,
                                                   const std::vector<at::Tensor>& data,
                                                   const std::optional<at::Tensor>& rng_state) {
  absl::flat_hash_map<std::string, at::Tensor> named;
  for (const auto& item : model.named_parameters()) named[item.key()] = item.value();
  for (const auto& item : model.named_buffers()) named[item.key()] = item.value();
  for (const auto& [name, tensor] : captured.constants) named[name] = tensor;
  std::vector<at::Tensor> bound;
  for (const Value* input : captured.graph()->inputs()) {
    const std::string& name = input->name();
    if (input->role() == InputRole::kRng) {
      if (rng_state) {
        bound.push_back(*rng_state);
      } else if (captured.rng_state) {
        bound.push_back(*captured.rng_state);
      } else {
        return absl::InvalidArgumentError("the graph needs rng.state but none was captured or given");
      }
      continue;
    }
    if (absl::StartsWith(name, "input.")) {
      size_t index = 0;
      if (!absl::SimpleAtoi(name.substr(6), &index) || index >= data.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("the graph needs ", name, " but ", data.size(), " data tensors were given"));
      }
      bound.push_back(data[index]);
      continue;
    }
    auto it = named.find(name);
    if (it == named.end()) {
      return absl::NotFoundError(absl::StrCat("the model has no parameter or buffer named ", name));
    }
    bound.push_back(it->second);
  }
  return bound;
}

}  // namespace magi
