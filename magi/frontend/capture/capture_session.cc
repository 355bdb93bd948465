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
#include "magi/module_api/module_scope.h"

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

// The tensor holds its whole storage from offset 0, densely (contiguous or permuted): see
// AliasTracker::RootOptions::starts_storage.
bool IsFull(const at::Tensor& tensor) {
  return tensor.storage_offset() == 0 && IsDenseLayout(tensor.sizes().vec(), tensor.strides().vec()) &&
         static_cast<size_t>(tensor.numel() * tensor.element_size()) == tensor.storage().nbytes();
}

}  // namespace

CaptureSession::Geometry CaptureSession::GeometryOf(const at::Tensor& tensor) {
  return {tensor.sizes().vec(), tensor.strides().vec(), tensor.storage_offset(), tensor.scalar_type()};
}

CaptureSession::CaptureSession(Graph* graph, Options options)
    : graph_(graph), options_(std::move(options)), tracker_(graph) {
  // Nodes the tracker emits (write-backs, regenerated views) belong to the op being recorded.
  tracker_.SetNodeHook([this](Node* node) {
    node->mutable_annotations().module_path = ModulePathForCurrentOp();
    node->mutable_annotations().phase = phase_;
  });
}

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

void CaptureSession::RegisterAlias(const at::Tensor& tensor, int alias) {
  tensors_[tensor.unsafeGetTensorImpl()] = {alias, tensor};
  if (!tensor.has_storage()) return;
  auto it = storages_.find(tensor.storage().unsafeGetStorageImpl());
  if (it != storages_.end()) it->second.aliases.emplace_back(GeometryOf(tensor), alias);
}

absl::Status CaptureSession::RegisterRoot(const at::Tensor& tensor, Value* value) {
  if (!tensor.has_storage()) {
    RegisterAlias(tensor, tracker_.AddRoot(value));
    return absl::OkStatus();
  }
  auto [it, inserted] = storages_.try_emplace(tensor.storage().unsafeGetStorageImpl());
  StorageRecord& storage = it->second;
  if (inserted) {
    AliasTracker::RootOptions options;
    options.starts_storage = IsFull(tensor);
    storage.root = tracker_.AddRoot(value, options);
    storage.root_dtype = tensor.scalar_type();
    if (value->is_graph_input()) storage.input_tensor = tensor;
    RegisterAlias(tensor, storage.root);
    return absl::OkStatus();
  }
  // Memory already seen, under a value the graph does not derive this one from (two
  // inputs over one storage; an op that returns memory its schema does not call a view).
  // It is the alias of that memory with its geometry (an as_strided view of the root if
  // none has it), so that writes through either reach the other; `value` goes unused.
  absl::StatusOr<int> alias = MemoryAlias(storage, tensor);
  if (alias.ok()) {
    tensors_[tensor.unsafeGetTensorImpl()] = {*alias, tensor};
    return absl::OkStatus();
  }
  // Not derivable: both read right, but a write to either would have to reach the other,
  // which the graph cannot say. The tracker refuses such writes with this reason.
  MAGI_ASSIGN_OR_RETURN(Value * other, tracker_.Read(storage.root));
  AliasTracker::RootOptions options;
  options.uncertain = absl::StrCat("%", value->name(), " and %", other->name(),
                                   " share memory in a layout Magi cannot derive one from the other");
  tracker_.MarkUncertain(storage.root, options.uncertain);
  RegisterAlias(tensor, tracker_.AddRoot(value, std::move(options)));
  return absl::OkStatus();
}

absl::StatusOr<int> CaptureSession::MemoryAlias(StorageRecord& storage, const at::Tensor& tensor) {
  Geometry geometry = GeometryOf(tensor);
  for (auto it = storage.aliases.rbegin(); it != storage.aliases.rend(); ++it) {
    if (it->first == geometry) return it->second;
  }
  MAGI_ASSIGN_OR_RETURN(Value * root, tracker_.Read(storage.root));
  if (!tracker_.StartsStorage(storage.root) || tensor.scalar_type() != storage.root_dtype) {
    return absl::UnimplementedError(absl::StrCat(
        "a tensor shares the memory of %", root->name(),
        " in a layout that no recorded view op produced, and that memory is not laid out densely from its start "
        "with the same dtype, so it cannot be derived with as_strided"));
  }
  MAGI_ASSIGN_OR_RETURN(Value * base, tracker_.StorageBase(storage.root));
  MAGI_ASSIGN_OR_RETURN(Type type, TypeOf(tensor));
  Node* node = AddRecordedNode("aten::as_strided",
                               {NodeArg(base), NodeArg(Attribute(geometry.sizes)), NodeArg(Attribute(geometry.strides)),
                                NodeArg(Attribute(geometry.offset))},
                               {std::move(type)});
  int alias = tracker_.AddView(storage.root, node, 0);
  storage.aliases.emplace_back(std::move(geometry), alias);
  return alias;
}

absl::StatusOr<Value*> CaptureSession::AddInput(const at::Tensor& tensor, const std::string& name, InputRole role) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (graph_->FindValue(name) != nullptr) return absl::InvalidArgumentError(absl::StrCat("input '", name, "' twice"));
  MAGI_ASSIGN_OR_RETURN(Type type, TypeOf(tensor));
  Value* value = graph_->AddInput(name, std::move(type), role);
  MAGI_RETURN_IF_ERROR(RegisterRoot(tensor, value));
  return value;
}

absl::StatusOr<int> CaptureSession::AliasOf(const at::Tensor& tensor, bool allow_lift) {
  auto it = tensors_.find(tensor.unsafeGetTensorImpl());
  if (it != tensors_.end()) return it->second.alias;
  if (tensor.has_storage()) {
    auto storage_it = storages_.find(tensor.storage().unsafeGetStorageImpl());
    if (storage_it != storages_.end()) {
      // A TensorImpl we have not seen over memory we have (a saved tensor unpacked by autograd).
      MAGI_ASSIGN_OR_RETURN(int alias, MemoryAlias(storage_it->second, tensor));
      tensors_[tensor.unsafeGetTensorImpl()] = {alias, tensor};
      return alias;
    }
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
  MAGI_RETURN_IF_ERROR(RegisterRoot(tensor, value));
  return tensors_.at(tensor.unsafeGetTensorImpl()).alias;
}

absl::StatusOr<Value*> CaptureSession::ValueOf(const at::Tensor& tensor, bool allow_lift) {
  MAGI_ASSIGN_OR_RETURN(int alias, AliasOf(tensor, allow_lift));
  return tracker_.Read(alias);
}

absl::StatusOr<Value*> CaptureSession::OutputValueOf(const at::Tensor& tensor) {
  std::lock_guard<std::mutex> lock(mutex_);
  return ValueOf(tensor, /*allow_lift=*/false);
}

bool CaptureSession::WasMutated(const at::Tensor& tensor) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = tensors_.find(tensor.unsafeGetTensorImpl());
  return it != tensors_.end() && tracker_.Written(it->second.alias);
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

  // as_strided addresses its input's storage, not its elements: it reads the storage's
  // root in the traced layout and becomes a view of the root (as in the FX importer).
  std::optional<AliasTracker::StridedInput> strided;
  if ((schema.name() == "aten::as_strided" || schema.name() == "aten::as_strided_") && !args.empty() &&
      args[0].isTensor()) {
    absl::StatusOr<int> alias = AliasOf(args[0].toTensor(), /*allow_lift=*/true);
    if (!alias.ok()) return fail(alias.status().message());
    absl::StatusOr<AliasTracker::StridedInput> input = tracker_.AsStridedInput(*alias, "its input");
    if (!input.ok()) return fail(input.status().message());
    strided = *input;
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
                             if (i == 0 && strided.has_value()) {
                               return std::optional<AtenArg>(AtenArg::Tensor(strided->value));
                             }
                             MAGI_ASSIGN_OR_RETURN(AtenArg value, AtenArgFromIValue(args[i], resolve, meta_device));
                             return std::optional<AtenArg>(std::move(value));
                           });
  if (!node_args.ok()) return fail(node_args.status().message());

  // Results: the tensors the op returned, or for a functionalized op the tensors it wrote.
  std::vector<at::Tensor> results;
  std::vector<int> view_sources;  // per result: the argument it is a view of by its schema, or -1
  const std::vector<int> sources = ViewSources(schema);
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
      const int source = r < sources.size() ? sources[r] : -1;
      if (value.isTensor()) {
        if (value.toTensor().defined()) {
          results.push_back(value.toTensor());
          view_sources.push_back(source);
        }
      } else if (value.isTensorList()) {
        for (const at::Tensor& t : value.toTensorVector()) {
          if (t.defined()) {
            results.push_back(t);
            view_sources.push_back(source);
          }
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
  // An in-place view op (as_strided_, transpose_, squeeze_, ...) changes which part of its
  // storage the tensor shows, not the data: from here on the tensor is that view.
  const bool inplace_view = !mutated.empty() && !ViewSources(*node_schema).empty() && ViewSources(*node_schema)[0] >= 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const at::Tensor& result = results[i];
    Value* value = node->result(static_cast<int>(i));
    absl::Status status;
    if (inplace_view) {
      if (results.size() != 1) return fail("an in-place view op on more than one tensor");
      absl::StatusOr<int> base = strided ? strided->base : AliasOf(result, /*allow_lift=*/false);
      if (!base.ok()) return fail(base.status().message());
      RegisterAlias(result, tracker_.AddView(*base, node, 0));
    } else if (!mutated.empty()) {
      absl::StatusOr<int> alias = AliasOf(result, /*allow_lift=*/true);
      if (!alias.ok()) return fail(alias.status().message());
      status = tracker_.Write(*alias, value);
      // An out= op may have resized its (root) output: a new TensorImpl over it maps by geometry.
      if (status.ok()) RegisterAlias(result, *alias);
    } else if (view_sources[i] == 0 && args[0].isTensor() && result.has_storage() && args[0].toTensor().has_storage() &&
               result.storage().unsafeGetStorageImpl() == args[0].toTensor().storage().unsafeGetStorageImpl()) {
      // A view of argument 0 by its schema that really shares its memory (ops that return a
      // view only sometimes, such as reshape, are roots when they copied).
      absl::StatusOr<int> base = strided ? strided->base : AliasOf(args[0].toTensor(), /*allow_lift=*/false);
      if (!base.ok()) return fail(base.status().message());
      RegisterAlias(result, tracker_.AddView(*base, node, static_cast<int>(i)));
    } else {
      status = RegisterRoot(result, value);
    }
    if (!status.ok()) return fail(status.message());
    // Backward ops of this op's autograd node get this op's module path.
    if (const auto& grad_fn = result.grad_fn()) {
      module_path_of_sequence_nr_.emplace(static_cast<int64_t>(grad_fn->sequence_nr()),
                                          node->annotations().module_path);
    }
  }
  for (const auto& [written, copy] : copies) {
    absl::StatusOr<int> alias = AliasOf(written, /*allow_lift=*/true);
    if (!alias.ok()) return fail(alias.status().message());
    absl::Status status = tracker_.Write(*alias, copy);
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
      for (const at::Tensor& tensor : written) {
        SnapshotInputBeforeWrite(tensor);
        // A written TensorImpl not seen yet, over memory that was, is mapped by its geometry
        // before the op can change it (an in-place view op, an out= resize). A failure
        // here is reported when the op is recorded.
        if (status_.ok() && !tensors_.contains(tensor.unsafeGetTensorImpl())) {
          AliasOf(tensor, /*allow_lift=*/false).IgnoreError();
        }
      }
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
