#include "magi/frontend/capture/capture_session.h"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/function.h>

#include <atomic>

#include "absl/strings/str_cat.h"
#include "magi/analysis/op_traits.h"
#include "magi/base/status_macros.h"
#include "magi/compat/torch_compat.h"
#include "magi/frontend/common/aten_arguments.h"
#include "magi/frontend/common/functional_variants.h"
#include "magi/frontend/module_scope.h"

namespace magi {
namespace {

std::atomic<CaptureSession*> g_current_session{nullptr};

// Autograd sequence numbers of the backward nodes running on this thread (innermost last).
std::vector<int64_t>& BackwardSequenceStack() {
  thread_local std::vector<int64_t> stack;
  return stack;
}

std::unique_ptr<at::ObserverContext> OnBackwardNodeStart(const at::RecordFunction& fn) {
  BackwardSequenceStack().push_back(fn.seqNr());
  return nullptr;
}

void OnBackwardNodeEnd(const at::RecordFunction&, at::ObserverContext*) {
  if (!BackwardSequenceStack().empty()) BackwardSequenceStack().pop_back();
}

// Arguments that `schema`'s kernel writes without declaring it: batch norm's running
// statistics in training (native_batch_norm, cudnn_batch_norm and miopen_batch_norm in
// LibTorch 1.13; 2.x's _native_batch_norm_legit declares them and is functionalized like
// any in-place op). The FX importer applies the same rule (IsolateRunningStatistics).
std::vector<size_t> UndeclaredWrites(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
  std::vector<size_t> written;
  if (!GetOpTraits(compat::OpNameOf(schema.operator_name())).side_effects || !MutatedArguments(schema).empty()) {
    return written;
  }
  const auto& arguments = schema.arguments();
  bool training = false;
  for (size_t i = 0; i < arguments.size() && i < args.size(); ++i) {
    if (arguments[i].name() == "training" && args[i].isBool()) training = args[i].toBool();
  }
  if (!training) return written;
  for (size_t i = 0; i < arguments.size() && i < args.size(); ++i) {
    if ((arguments[i].name() == "running_mean" || arguments[i].name() == "running_var") && args[i].isTensor() &&
        args[i].toTensor().defined()) {
      written.push_back(i);
    }
  }
  return written;
}

// The tensors a call of `schema` with `args` writes: declared (alias '!') or undeclared.
std::vector<at::Tensor> WrittenTensors(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
  std::vector<size_t> indices = MutatedArguments(schema);
  for (size_t i : UndeclaredWrites(schema, args)) indices.push_back(i);
  std::vector<at::Tensor> written;
  for (size_t i : indices) {
    if (i >= args.size()) continue;
    if (args[i].isTensor()) {
      if (args[i].toTensor().defined()) written.push_back(args[i].toTensor());
    } else if (args[i].isTensorList()) {
      for (const at::Tensor& t : args[i].toTensorVector()) {
        if (t.defined()) written.push_back(t);
      }
    }
  }
  return written;
}

bool IsFull(const at::Tensor& tensor) {
  return tensor.storage_offset() == 0 && tensor.is_contiguous() &&
         static_cast<size_t>(tensor.numel() * tensor.element_size()) == tensor.storage().nbytes();
}

}  // namespace

CaptureSession::Geometry CaptureSession::GeometryOf(const at::Tensor& tensor) {
  return {tensor.sizes().vec(), tensor.strides().vec(), tensor.storage_offset(), tensor.scalar_type()};
}

CaptureSession::CaptureSession(Graph* graph, Options options) : graph_(graph), options_(std::move(options)) {}

CaptureSession* CaptureSession::Current() { return g_current_session.load(std::memory_order_acquire); }

absl::Status CaptureSession::status() {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_;
}

absl::StatusOr<Type> CaptureSession::TypeOf(const at::Tensor& tensor) {
  const Device* device = options_.device_override ? &*options_.device_override : nullptr;
  MAGI_ASSIGN_OR_RETURN(TensorType type, compat::TensorTypeOf(tensor, device));
  return Type::Tensor(std::move(type));
}

void CaptureSession::Register(const at::Tensor& tensor, Value* value) {
  const c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  auto it = storages_.find(storage);
  if (it == storages_.end()) {
    StorageRecord record;
    record.base = value;
    record.geometry = GeometryOf(tensor);
    record.base_is_full = IsFull(tensor);
    if (value->is_graph_input()) {
      record.input = value;
      record.input_tensor = tensor;
    }
    it = storages_.emplace(storage, std::move(record)).first;
  }
  it->second.aliases.push_back({GeometryOf(tensor), value, it->second.version});
  tensors_[tensor.unsafeGetTensorImpl()] = {value, it->second.version, tensor};
}

absl::StatusOr<Value*> CaptureSession::ViewOfStorage(StorageRecord& storage, const at::Tensor& tensor) {
  Geometry geometry = GeometryOf(tensor);
  for (auto it = storage.aliases.rbegin(); it != storage.aliases.rend(); ++it) {
    if (it->version == storage.version && it->geometry == geometry) return it->value;
  }
  if (geometry == storage.geometry) return storage.base;
  if (!storage.base_is_full || tensor.scalar_type() != storage.geometry.dtype) {
    return absl::UnimplementedError("a view of a mutated tensor whose base is itself a partial view");
  }
  MAGI_ASSIGN_OR_RETURN(Type type, TypeOf(tensor));
  Node* node = AddRecordedNode("aten::as_strided",
                               {NodeArg(storage.base), NodeArg(Attribute(geometry.sizes)),
                                NodeArg(Attribute(geometry.strides)), NodeArg(Attribute(geometry.offset))},
                               {std::move(type)});
  storage.aliases.push_back({geometry, node->result(0), storage.version});
  return node->result(0);
}

absl::StatusOr<Value*> CaptureSession::AddInput(const at::Tensor& tensor, const std::string& name, InputRole role) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (graph_->FindValue(name) != nullptr) return absl::InvalidArgumentError(absl::StrCat("input '", name, "' twice"));
  MAGI_ASSIGN_OR_RETURN(Type type, TypeOf(tensor));
  Value* value = graph_->AddInput(name, std::move(type), role);
  Register(tensor, value);
  return value;
}

absl::StatusOr<Value*> CaptureSession::ValueOf(const at::Tensor& tensor, bool allow_lift) {
  auto storage_it = tensor.has_storage() ? storages_.find(tensor.storage().unsafeGetStorageImpl()) : storages_.end();
  auto it = tensors_.find(tensor.unsafeGetTensorImpl());
  if (it != tensors_.end()) {
    TensorRecord& record = it->second;
    if (storage_it == storages_.end() || record.version == storage_it->second.version) return record.value;
    // The storage was written through another alias since this value was taken.
    MAGI_ASSIGN_OR_RETURN(Value * value, ViewOfStorage(storage_it->second, tensor));
    record.value = value;
    record.version = storage_it->second.version;
    return value;
  }
  if (storage_it != storages_.end()) {
    // A TensorImpl we have not seen over memory we have (a saved tensor unpacked by autograd).
    MAGI_ASSIGN_OR_RETURN(Value * value, ViewOfStorage(storage_it->second, tensor));
    tensors_[tensor.unsafeGetTensorImpl()] = {value, storage_it->second.version, tensor};
    return value;
  }
  if (!allow_lift) {
    absl::StatusOr<TensorType> type = compat::TensorTypeOf(tensor);
    return absl::NotFoundError(absl::StrCat("a tensor of type ", type.ok() ? type->ToString() : tensor.toString(),
                                            " was not produced by any recorded op"));
  }
  if (!options_.allow_constants) {
    return absl::FailedPreconditionError("a tensor created outside the captured step is used (constants are off)");
  }
  if (tensor.requires_grad()) {
    absl::StatusOr<TensorType> type = compat::TensorTypeOf(tensor);
    return absl::FailedPreconditionError(absl::StrCat(
        "a tensor (", type.ok() ? type->ToString() : "?",
        ") that requires grad but is neither a parameter nor computed in the step is used "
        "(register it as a parameter of the module)"));
  }
  std::string name = absl::StrCat("constant.", constants_.size());
  MAGI_ASSIGN_OR_RETURN(Type type, TypeOf(tensor));
  Value* value = graph_->AddInput(name, std::move(type), InputRole::kBuffer);
  constants_.emplace_back(name, tensor);
  Register(tensor, value);
  return value;
}

absl::StatusOr<Value*> CaptureSession::OutputValueOf(const at::Tensor& tensor) {
  std::lock_guard<std::mutex> lock(mutex_);
  return ValueOf(tensor, /*allow_lift=*/false);
}

bool CaptureSession::WasMutated(const at::Tensor& tensor) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = storages_.find(tensor.storage().unsafeGetStorageImpl());
  return it != storages_.end() && it->second.version > 0;
}

void CaptureSession::SnapshotInputBeforeWrite(const at::Tensor& tensor) {
  if (!tensor.has_storage()) return;
  auto it = storages_.find(tensor.storage().unsafeGetStorageImpl());
  if (it == storages_.end() || !it->second.input_tensor.defined() || it->second.snapshot.defined()) return;
  // Not recorded: the copy is the capture's own, not the step's.
  c10::impl::ExcludeDispatchKeyGuard exclude(compat::kCaptureKey);
  at::NoGradGuard no_grad;
  it->second.snapshot = it->second.input_tensor.detach().clone();
}

void CaptureSession::RestoreWrittenInputs() {
  std::lock_guard<std::mutex> lock(mutex_);
  c10::impl::ExcludeDispatchKeyGuard exclude(compat::kCaptureKey);
  at::NoGradGuard no_grad;
  for (auto& [storage, record] : storages_) {
    if (!record.snapshot.defined()) continue;
    record.input_tensor.detach().copy_(record.snapshot);
    record.snapshot = at::Tensor();
  }
}

absl::Status CaptureSession::UpdateAfterMutation(const at::Tensor& tensor, Value* new_value) {
  StorageRecord& storage = storages_.at(tensor.storage().unsafeGetStorageImpl());
  Geometry geometry = GeometryOf(tensor);
  if (geometry == storage.geometry) {
    storage.base = new_value;
  } else if (storage.base_is_full && tensor.scalar_type() == storage.geometry.dtype) {
    // Write the mutated view back into the whole storage.
    Type base_type = storage.base->type();
    Node* node = AddRecordedNode("aten::as_strided_scatter",
                                 {NodeArg(storage.base), NodeArg(new_value), NodeArg(Attribute(geometry.sizes)),
                                  NodeArg(Attribute(geometry.strides)), NodeArg(Attribute(geometry.offset))},
                                 {std::move(base_type)});
    storage.base = node->result(0);
  } else {
    return absl::UnimplementedError("an in-place write to a view whose base is itself a partial view");
  }
  ++storage.version;
  storage.aliases.push_back({storage.geometry, storage.base, storage.version});
  storage.aliases.push_back({geometry, new_value, storage.version});
  tensors_[tensor.unsafeGetTensorImpl()] = {new_value, storage.version, tensor};
  return absl::OkStatus();
}

std::string CaptureSession::ModulePathForCurrentOp() {
  const std::vector<int64_t>& backward = BackwardSequenceStack();
  if (!backward.empty()) {
    auto it = module_path_of_sequence_nr_.find(backward.back());
    return it == module_path_of_sequence_nr_.end() ? std::string() : it->second;
  }
  return CurrentModulePath();
}

Node* CaptureSession::AddRecordedNode(std::string op, std::vector<NodeArg> args, std::vector<Type> types) {
  std::string prefix = absl::StrCat(SplitOpName(op).name, "_");
  std::vector<std::string> names;
  for (size_t i = 0; i < types.size(); ++i) names.push_back(graph_->FreshName(prefix));
  Node* node = graph_->AddNode(std::move(op), std::move(args), std::move(types), nullptr, std::move(names));
  node->mutable_annotations().module_path = ModulePathForCurrentOp();
  node->mutable_annotations().phase = phase_;
  return node;
}

absl::Status CaptureSession::RecordLocked(const c10::OperatorHandle& op, const std::vector<c10::IValue>& args,
                                          const torch::jit::Stack& stack, size_t num_returns) {
  const c10::FunctionSchema& schema = op.schema();
  std::string name = compat::OpNameOf(schema.operator_name());
  auto fail = [&](absl::string_view message) {
    std::string path = ModulePathForCurrentOp();
    return absl::Status(absl::StatusCode::kFailedPrecondition,
                        absl::StrCat("cannot capture ", name, path.empty() ? "" : absl::StrCat(" in module '", path, "'"),
                                     ": ", message));
  };
  if (GetOpTraits(name).data_dependent) {
    return fail(
        "it reads values out of tensor data (e.g. Tensor::item() or a data-dependent shape); a captured "
        "graph cannot depend on them. Keep such logic outside the captured step");
  }
  std::vector<size_t> mutated = MutatedArguments(schema);
  const c10::FunctionSchema* node_schema = &schema;
  c10::optional<c10::OperatorHandle> functional;
  if (!mutated.empty()) {
    functional = FindFunctionalVariant(op);
    if (!functional) return fail("it writes to its inputs and has no functional variant");
    node_schema = &functional->schema();
    name = compat::OpNameOf(node_schema->operator_name());
  }
  for (const c10::Argument& argument : schema.arguments()) {
    if (compat::ClassifyArgument(argument).kind == compat::ArgKind::kGenerator) uses_rng_ = true;
  }

  // Undeclared writes (batch norm's running statistics): the node writes copies, which
  // become the statistics' values after it.
  std::vector<std::pair<at::Tensor, Value*>> copies;
  for (size_t i : UndeclaredWrites(schema, args)) {
    const at::Tensor& written = args[i].toTensor();
    absl::StatusOr<Value*> current = ValueOf(written, /*allow_lift=*/true);
    if (!current.ok()) return fail(current.status().message());
    Type type = (*current)->type();
    Node* copy = AddRecordedNode("aten::clone", {NodeArg(*current), NodeArg(Attribute(NoneAttr{}), "memory_format")},
                                 {std::move(type)});
    copies.emplace_back(written, copy->result(0));
  }

  // Arguments, in the (functional) schema's order (the shared ATen-argument converter).
  const Device* meta_device = options_.device_override ? &*options_.device_override : nullptr;
  auto resolve = [this, &copies](const at::Tensor& tensor) -> absl::StatusOr<Value*> {
    for (const auto& [written, copy] : copies) {
      if (written.unsafeGetTensorImpl() == tensor.unsafeGetTensorImpl()) return copy;
    }
    return ValueOf(tensor, /*allow_lift=*/true);
  };
  absl::StatusOr<std::vector<NodeArg>> node_args =
      ConvertCallArguments(schema, functional ? node_schema : nullptr,
                           [&](size_t i) -> absl::StatusOr<std::optional<AtenArg>> {
                             MAGI_ASSIGN_OR_RETURN(AtenArg value, AtenArgFromIValue(args[i], resolve, meta_device));
                             return std::optional<AtenArg>(std::move(value));
                           });
  if (!node_args.ok()) return fail(node_args.status().message());

  // Results: the tensors the op returned, or for a functionalized op the tensors it wrote.
  std::vector<at::Tensor> results;
  if (!mutated.empty()) {
    for (size_t i : mutated) {
      if (args[i].isTensor()) {
        results.push_back(args[i].toTensor());
      } else if (args[i].isTensorList()) {
        for (const at::Tensor& t : args[i].toTensorVector()) results.push_back(t);
      } else {
        return fail("it writes to an argument that is not a tensor");
      }
    }
  } else {
    for (size_t r = 0; r < num_returns; ++r) {
      const c10::IValue& value = stack[stack.size() - num_returns + r];
      // Undefined tensors (an absent optional gradient, an unused debug output) get no
      // value: no later op can use them, and the interpreter skips them the same way.
      if (value.isTensor()) {
        if (value.toTensor().defined()) results.push_back(value.toTensor());
      } else if (value.isTensorList()) {
        for (const at::Tensor& t : value.toTensorVector()) {
          if (t.defined()) results.push_back(t);
        }
      } else if (value.isInt() || value.isDouble() || value.isBool() || compat::IsIntLike(value) || value.isNone()) {
        // Shape-like numbers: later ops receive them as constants.
      } else {
        return fail(absl::StrCat("it returns a ", value.tagKind(), ", which the IR cannot hold"));
      }
    }
  }
  std::vector<Type> types;
  for (const at::Tensor& t : results) {
    absl::StatusOr<Type> type = TypeOf(t);
    if (!type.ok()) return fail(type.status().message());
    types.push_back(*std::move(type));
  }
  Node* node = AddRecordedNode(name, *std::move(node_args), std::move(types));
  ++recorded_ops_;
  for (size_t i = 0; i < results.size(); ++i) {
    if (mutated.empty()) {
      Register(results[i], node->result(static_cast<int>(i)));
    } else {
      absl::Status status = UpdateAfterMutation(results[i], node->result(static_cast<int>(i)));
      if (!status.ok()) return fail(status.message());
    }
    // Backward ops of this op's autograd node get this op's module path.
    if (const auto& grad_fn = results[i].grad_fn()) {
      module_path_of_sequence_nr_.emplace(static_cast<int64_t>(grad_fn->sequence_nr()),
                                          node->annotations().module_path);
    }
  }
  for (const auto& [written, copy] : copies) {
    absl::Status status = UpdateAfterMutation(written, copy);
    if (!status.ok()) return fail(status.message());
  }
  return absl::OkStatus();
}

void CaptureSession::Record(const c10::OperatorHandle& op, c10::DispatchKeySet below, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  size_t num_args = schema.arguments().size();
  std::vector<c10::IValue> args(stack->end() - num_args, stack->end());
  {
    // Graph inputs this op writes are copied first, for RestoreWrittenInputs().
    std::vector<at::Tensor> written = WrittenTensors(schema, args);
    if (!written.empty()) {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const at::Tensor& tensor : written) SnapshotInputBeforeWrite(tensor);
    }
  }
  {
    c10::impl::ExcludeDispatchKeyGuard exclude(compat::kCaptureKey);
    op.redispatchBoxed(below, stack);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (!status_.ok()) return;
  absl::Status status = RecordLocked(op, args, *stack, schema.returns().size());
  if (!status.ok()) {
    status_ = status;
    TORCH_CHECK(false, std::string(status.message()));
  }
}

CaptureScope::CaptureScope(CaptureSession* session)
    : previous_(g_current_session.exchange(session)),
      callback_handle_(at::addGlobalCallback(at::RecordFunctionCallback(&OnBackwardNodeStart, &OnBackwardNodeEnd)
                                                 .scopes({at::RecordScope::BACKWARD_FUNCTION}))),
      include_(compat::kCaptureKey) {}

CaptureScope::~CaptureScope() {
  at::removeCallback(callback_handle_);
  g_current_session.store(previous_);
}

}  // namespace magi
