#include "magi/frontend/capture/capture.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>

#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"
#include "magi/frontend/capture/capture_session.h"

namespace magi {
namespace {

constexpr char kRngInput[] = "rng.state";

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
    if (value != graph.FindValue(name)) graph.AddOutput(absl::StrCat("mutated.", name), value);
  }
  return absl::OkStatus();
}

// Runs `body` under the session; c10::Error thrown by the traced code becomes a Status
// (the session's own, more precise error when it raised it).
absl::Status RunCaptured(CaptureSession& session, const std::function<absl::Status()>& body) {
  absl::Status status;
  try {
    CaptureScope scope(&session);
    status = body();
  } catch (const c10::Error& error) {
    absl::Status recorded = session.status();
    if (!recorded.ok()) return recorded;
    return absl::InternalError(absl::StrCat("the captured code raised: ", error.what_without_backtrace()));
  } catch (const std::exception& error) {
    return absl::InternalError(absl::StrCat("the captured code raised: ", error.what()));
  }
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
  at::Tensor rng_state;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    rng_state = generator.get_state();
  }
  MAGI_RETURN_IF_ERROR(RunCaptured(session, [&] { return body(session, *graph); }));
  MAGI_RETURN_IF_ERROR(AddMutatedInputOutputs(session, model, *graph));
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
