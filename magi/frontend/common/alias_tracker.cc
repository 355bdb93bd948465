#include "magi/frontend/common/alias_tracker.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"

namespace magi {
namespace {

// The constant argument `i` of `node`; null if absent or an operand.
const Attribute* ConstArg(const Node* node, size_t i) {
  if (i >= node->args().size() || node->args()[i].value.is_operand_ref()) return nullptr;
  return &node->args()[i].value;
}

absl::StatusOr<int64_t> IntArg(const Node* node, size_t i, std::optional<int64_t> default_value = std::nullopt) {
  const Attribute* a = ConstArg(node, i);
  if (a != nullptr && a->kind() == AttrKind::kInt) return a->as_int();
  if ((a == nullptr || a->is_none()) && default_value.has_value()) return *default_value;
  return absl::InvalidArgumentError(absl::StrCat(node->op(), ": argument ", i, " is not an int"));
}

absl::StatusOr<std::vector<int64_t>> IntListArg(const Node* node, size_t i) {
  const Attribute* a = ConstArg(node, i);
  if (a != nullptr && a->kind() == AttrKind::kIntList) return a->as_int_list();
  return absl::InvalidArgumentError(absl::StrCat(node->op(), ": argument ", i, " is not an int list"));
}

// The argument list of `node` with operand 0 replaced by `base`.
std::vector<NodeArg> ArgsOnBase(const Node* node, Value* base) {
  std::vector<NodeArg> args;
  for (const Argument& arg : node->args()) {
    switch (arg.value.kind()) {
      case AttrKind::kOperand: {
        int index = arg.value.as_operand().index;
        args.emplace_back(index == 0 ? base : node->operand(index), arg.name);
        break;
      }
      case AttrKind::kOperandList: {
        std::vector<Value*> values;
        for (int index : arg.value.as_operand_list().indices) {
          values.push_back(index == OperandListRef::kNoOperand ? nullptr
                                                                : (index == 0 ? base : node->operand(index)));
        }
        args.emplace_back(std::move(values), arg.name);
        break;
      }
      default:
        args.emplace_back(arg.value, arg.name);
    }
  }
  return args;
}

int64_t Normalize(int64_t dim, int64_t rank) { return dim < 0 ? dim + rank : dim; }

bool Is(const std::string& op, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return op == n; });
}

}  // namespace

bool IsDenseLayout(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  if (strides.empty()) return true;
  if (strides.size() != sizes.size()) return false;
  std::vector<size_t> dims;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return true;  // no elements
    if (sizes[d] != 1) dims.push_back(d);
  }
  // From the innermost (smallest stride) out, each stride is the product of the sizes inside it.
  std::stable_sort(dims.begin(), dims.end(), [&](size_t a, size_t b) { return strides[a] < strides[b]; });
  int64_t expected = 1;
  for (size_t d : dims) {
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

int AliasTracker::AddRoot(Value* value) { return AddRoot(value, RootOptions()); }

int AliasTracker::AddRoot(Value* value, RootOptions options) {
  Storage storage;
  storage.value = value;
  storage.starts_storage = options.starts_storage;
  if (value->type().is_tensor()) {
    storage.traced_sizes = value->type().tensor().sizes;
    storage.traced_strides = value->type().tensor().strides;
  }
  storage.uncertain = std::move(options.uncertain);
  if (value->is_graph_input()) storage.input = value;
  storages_.push_back(std::move(storage));
  Alias alias;
  alias.storage = static_cast<int>(storages_.size()) - 1;
  alias.value = value;
  aliases_.push_back(alias);
  return static_cast<int>(aliases_.size()) - 1;
}

int AliasTracker::AddView(int base, const Node* view_node, int result_index) {
  Alias alias;
  alias.storage = aliases_.at(base).storage;
  alias.parent = base;
  alias.view = view_node;
  alias.result_index = result_index;
  alias.value = view_node->result(result_index);
  alias.version = storages_[alias.storage].version;
  aliases_.push_back(alias);
  return static_cast<int>(aliases_.size()) - 1;
}

void AliasTracker::MarkUncertain(int alias, std::string reason) {
  Storage& storage = storages_[aliases_.at(alias).storage];
  if (storage.uncertain.empty()) storage.uncertain = std::move(reason);
}

bool AliasTracker::LayoutIsFaithful(int alias) const { return storages_[aliases_.at(alias).storage].faithful; }

bool AliasTracker::StartsStorage(int alias) const { return storages_[aliases_.at(alias).storage].starts_storage; }

absl::StatusOr<Value*> AliasTracker::StorageBase(int alias) {
  MAGI_ASSIGN_OR_RETURN(RootMemory memory, MemoryOf(RootOf(alias), /*for_write=*/false));
  return memory.value;
}

absl::StatusOr<AliasTracker::RootMemory> AliasTracker::MemoryOf(int root, bool for_write) {
  MAGI_ASSIGN_OR_RETURN(Value * value, Read(root));
  const Storage& storage = storages_[aliases_[root].storage];
  const TensorType& now = value->type().tensor();
  const TensorType traced{now.dtype, storage.traced_sizes, storage.traced_strides, now.device};
  // A root resized since it was traced (out= into it) is laid out contiguously, as resize_ does.
  const bool permuted =
      storage.starts_storage && !traced.strides.empty() && !traced.IsContiguous() && now.sizes == traced.sizes;
  RootMemory memory;
  memory.value = value;
  // Reading through as_strided needs only the traced layout, which a faithful root has.
  // Writing back needs a contiguous tensor too: LibTorch 1.13's as_strided_scatter asserts
  // on a non-contiguous input that requires grad.
  if (storage.faithful && (!for_write || !permuted)) return memory;
  if (!storage.starts_storage) {
    return absl::UnimplementedError(
        absl::StrCat("it addresses the memory of %", value->name(),
                     " directly, whose layout after an in-place write Magi cannot reproduce (it does not hold its "
                     "storage densely from its start)"));
  }
  auto contiguous = [&](Value* input, std::vector<int64_t> sizes) {
    Type type = Type::Tensor({now.dtype, std::move(sizes), {}, now.device});
    return Emit("aten::contiguous", {NodeArg(input), NodeArg(Attribute(int64_t{0}), "memory_format")}, type,
                value->name())
        ->result(0);
  };
  if (!permuted) {
    memory.value = contiguous(value, now.sizes);
    return memory;
  }
  // A permuted dense layout: the root's dimensions in memory order (outermost first), made
  // contiguous, hold its elements where the traced storage held them; as_strided and
  // as_strided_scatter address that tensor as they addressed the traced root.
  const int64_t rank = traced.rank();
  std::vector<int64_t> order(rank);
  for (int64_t d = 0; d < rank; ++d) order[d] = d;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return traced.strides[a] > traced.strides[b]; });
  std::vector<int64_t> in_memory_order(rank);
  memory.back.resize(rank);
  for (int64_t i = 0; i < rank; ++i) {
    memory.back[order[i]] = i;
    in_memory_order[i] = traced.sizes[order[i]];
  }
  Type permuted_type = Type::Tensor({now.dtype, in_memory_order, {}, now.device});
  Value* memory_order =
      Emit("aten::permute", {NodeArg(value), NodeArg(Attribute(order))}, permuted_type, value->name())->result(0);
  memory.value = contiguous(memory_order, in_memory_order);
  return memory;
}

int AliasTracker::RootOf(int alias) const {
  while (aliases_.at(alias).parent >= 0) alias = aliases_[alias].parent;
  return alias;
}

Node* AliasTracker::Emit(std::string op, std::vector<NodeArg> args, const Type& type, const std::string& hint) {
  std::vector<Type> types = {type};
  Node* node =
      graph_->AddNode(std::move(op), std::move(args), std::move(types), nullptr, {graph_->FreshName(hint + ".")});
  if (hook_) hook_(node);
  return node;
}

bool AliasTracker::Written(int alias) const { return storages_[aliases_.at(alias).storage].written; }

absl::StatusOr<AliasTracker::StridedInput> AliasTracker::AsStridedInput(int alias, absl::string_view what) {
  StridedInput input;
  if (StartsStorage(alias)) {
    input.base = RootOf(alias);
    MAGI_ASSIGN_OR_RETURN(input.value, StorageBase(alias));
    return input;
  }
  if (!LayoutIsFaithful(alias)) {
    return absl::UnimplementedError(absl::StrCat(
        "as_strided of ", what,
        ", whose storage was written in place and is not laid out densely from its start: its layout cannot be "
        "reproduced"));
  }
  input.base = alias;
  MAGI_ASSIGN_OR_RETURN(input.value, Read(alias));
  return input;
}

absl::StatusOr<Value*> AliasTracker::Read(int id) {
  Alias& alias = aliases_.at(id);
  const Storage& storage = storages_[alias.storage];
  if (alias.version == storage.version) return alias.value;
  if (alias.parent < 0) {
    alias.value = storage.value;
    alias.version = storage.version;
    return alias.value;
  }
  // as_strided addresses memory, not the parent's elements: it needs the traced layout.
  const bool addresses_memory = alias.view->op() == "aten::as_strided" && aliases_[alias.parent].parent < 0;
  MAGI_ASSIGN_OR_RETURN(Value * parent, addresses_memory ? StorageBase(alias.parent) : Read(alias.parent));
  // Replay the view op on the parent's current value.
  Alias& current = aliases_[id];
  const Node* view = current.view;
  std::vector<Type> types;
  std::vector<std::string> names;
  for (const Value* result : view->results()) {
    types.push_back(result->type());
    names.push_back(graph_->FreshName(result->name() + "."));
  }
  Node* replay = graph_->AddNode(view->op(), ArgsOnBase(view, parent), std::move(types), nullptr, std::move(names));
  if (hook_) hook_(replay);
  current.value = replay->result(current.result_index);
  current.version = storages_[current.storage].version;
  return current.value;
}

absl::Status AliasTracker::Write(int id, Value* value) {
  Storage& storage = storages_[aliases_.at(id).storage];
  if (!storage.uncertain.empty()) {
    return absl::UnimplementedError(
        absl::StrCat("it writes to a tensor whose aliasing is not known (", storage.uncertain,
                     "); Magi cannot tell which other tensors see the write"));
  }
  const Alias alias = aliases_[id];
  if (alias.parent >= 0 && value->type().is_tensor() && alias.value->type().is_tensor() &&
      value->type().tensor().sizes != alias.value->type().tensor().sizes) {
    // A view keeps its shape; an op that resizes a view it writes (out= into a slice) has
    // no functional equivalent here.
    return absl::UnimplementedError(absl::StrCat("it writes a ", value->type().ToString(), " into %",
                                                 alias.value->name(), ", a view of another shape (",
                                                 alias.value->type().ToString(), ")"));
  }
  if (alias.parent < 0) {
    storage.value = value;
    storage.faithful = false;
  } else {
    if (alias.view->op() == "aten::as_strided" && aliases_[alias.parent].parent < 0) {
      // as_strided_scatter into the root's memory, then back to the root's shape.
      MAGI_ASSIGN_OR_RETURN(RootMemory memory, MemoryOf(alias.parent, /*for_write=*/true));
      MAGI_ASSIGN_OR_RETURN(Value * scattered, Inverse(alias, memory.value, value));
      Value* new_parent = scattered;
      if (!memory.back.empty()) {
        const TensorType& root = aliases_[alias.parent].value->type().tensor();
        new_parent = Emit("aten::permute", {NodeArg(scattered), NodeArg(Attribute(memory.back))},
                          Type::Tensor({root.dtype, root.sizes, storage.traced_strides, root.device}),
                          aliases_[alias.parent].value->name())
                         ->result(0);
      }
      MAGI_RETURN_IF_ERROR(Write(alias.parent, new_parent));
    } else {
      MAGI_ASSIGN_OR_RETURN(Value * parent_value, Read(alias.parent));
      MAGI_ASSIGN_OR_RETURN(Value * new_parent, Inverse(alias, parent_value, value));
      MAGI_RETURN_IF_ERROR(Write(alias.parent, new_parent));
    }
  }
  Storage& written = storages_[alias.storage];
  if (alias.parent < 0) ++written.version;
  written.written = true;
  aliases_[id].value = value;
  aliases_[id].version = written.version;
  return absl::OkStatus();
}

absl::StatusOr<Value*> AliasTracker::Inverse(const Alias& alias, Value* base, Value* updated) {
  const Node* view = alias.view;
  const std::string& op = view->op();
  const Type& base_type = base->type();
  const int64_t rank = base_type.tensor().rank();
  const std::vector<int64_t>& sizes = base_type.tensor().sizes;
  auto refuse = [&](absl::string_view why) {
    return absl::UnimplementedError(absl::StrCat("it writes through a view made by ", op, " (",
                                                 view->result(alias.result_index)->name(), "): ", why));
  };
  auto scatter = [&](std::string scatter_op, std::vector<NodeArg> args) -> Value* {
    args.insert(args.begin(), {NodeArg(base), NodeArg(updated)});
    return Emit(std::move(scatter_op), std::move(args), base_type, base->name())->result(0);
  };
  auto reshape_back = [&]() -> Value* {
    Type type = Type::Tensor({base_type.tensor().dtype, sizes, {}, base_type.tensor().device});
    return Emit("aten::reshape", {NodeArg(updated), NodeArg(Attribute(sizes))}, type, base->name())->result(0);
  };
  auto unary = [&](const char* inverse_op) -> Value* {
    return Emit(inverse_op, {NodeArg(updated)}, base_type, base->name())->result(0);
  };
  auto slice_back = [&](int64_t dim, int64_t start, int64_t end) -> Value* {
    return scatter("aten::slice_scatter", {NodeArg(Attribute(dim)), NodeArg(Attribute(start)),
                                           NodeArg(Attribute(end)), NodeArg(Attribute(int64_t{1}))});
  };

  if (Is(op, {"aten::alias", "aten::detach", "aten::lift_fresh", "aten::_fw_primal", "aten::positive",
              "aten::contiguous", "aten::resolve_conj", "aten::resolve_neg"})) {
    return updated;
  }
  if (Is(op, {"aten::view", "aten::_unsafe_view", "aten::_reshape_alias", "aten::view_as", "aten::squeeze",
              "aten::squeeze.dim", "aten::squeeze.dims", "aten::unsqueeze", "aten::flatten.using_ints",
              "aten::unflatten.int", "aten::reshape", "aten::reshape_as", "aten::ravel"})) {
    return reshape_back();
  }
  if (op == "aten::select.int") {
    return scatter("aten::select_scatter", {NodeArg(*ConstArg(view, 1)), NodeArg(*ConstArg(view, 2))});
  }
  if (op == "aten::slice.Tensor") {
    std::vector<NodeArg> args;
    for (size_t i = 1; i <= 4; ++i) {
      const Attribute* a = ConstArg(view, i);
      if (a == nullptr) return refuse("its arguments are not constants");
      args.emplace_back(*a);
    }
    return scatter("aten::slice_scatter", std::move(args));
  }
  if (op == "aten::diagonal") {
    std::vector<NodeArg> args;
    for (size_t i = 1; i <= 3; ++i) {
      const Attribute* a = ConstArg(view, i);
      if (a == nullptr) return refuse("its arguments are not constants");
      args.emplace_back(*a);
    }
    return scatter("aten::diagonal_scatter", std::move(args));
  }
  if (op == "aten::narrow") {
    MAGI_ASSIGN_OR_RETURN(int64_t dim, IntArg(view, 1));
    MAGI_ASSIGN_OR_RETURN(int64_t start, IntArg(view, 2));
    MAGI_ASSIGN_OR_RETURN(int64_t length, IntArg(view, 3));
    dim = Normalize(dim, rank);
    if (start < 0) start += sizes.at(dim);
    return slice_back(dim, start, start + length);
  }
  if (Is(op, {"aten::split.Tensor", "aten::split_with_sizes", "aten::unsafe_split.Tensor",
              "aten::unsafe_split_with_sizes"})) {
    MAGI_ASSIGN_OR_RETURN(int64_t dim, IntArg(view, 2, 0));
    dim = Normalize(dim, rank);
    if (dim < 0 || dim >= rank) return refuse("its dim is out of range");
    int64_t start = 0, length = 0;
    if (op == "aten::split.Tensor" || op == "aten::unsafe_split.Tensor") {
      MAGI_ASSIGN_OR_RETURN(int64_t split_size, IntArg(view, 1));
      start = split_size * alias.result_index;
      length = split_size;
    } else {
      MAGI_ASSIGN_OR_RETURN(std::vector<int64_t> split_sizes, IntListArg(view, 1));
      for (int k = 0; k < alias.result_index; ++k) start += split_sizes.at(k);
      length = split_sizes.at(alias.result_index);
    }
    return slice_back(dim, start, std::min(start + length, sizes[dim]));
  }
  if (op == "aten::unbind.int") {
    MAGI_ASSIGN_OR_RETURN(int64_t dim, IntArg(view, 1, 0));
    return scatter("aten::select_scatter",
                   {NodeArg(Attribute(dim)), NodeArg(Attribute(static_cast<int64_t>(alias.result_index)))});
  }
  if (op == "aten::t") return unary("aten::t");
  if (op == "aten::transpose.int") {
    MAGI_ASSIGN_OR_RETURN(int64_t d0, IntArg(view, 1));
    MAGI_ASSIGN_OR_RETURN(int64_t d1, IntArg(view, 2));
    return Emit("aten::transpose.int", {NodeArg(updated), NodeArg(Attribute(d0)), NodeArg(Attribute(d1))}, base_type,
                base->name())
        ->result(0);
  }
  if (op == "aten::permute") {
    MAGI_ASSIGN_OR_RETURN(std::vector<int64_t> dims, IntListArg(view, 1));
    std::vector<int64_t> inverse(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) {
      int64_t d = Normalize(dims[i], static_cast<int64_t>(dims.size()));
      if (d < 0 || d >= static_cast<int64_t>(dims.size())) return refuse("its dims are out of range");
      inverse[d] = static_cast<int64_t>(i);
    }
    return Emit("aten::permute", {NodeArg(updated), NodeArg(Attribute(inverse))}, base_type, base->name())->result(0);
  }
  if (op == "aten::view_as_real") return unary("aten::view_as_complex");
  if (op == "aten::view_as_complex") return unary("aten::view_as_real");
  if (op == "aten::_conj") return unary("aten::_conj");
  if (op == "aten::_neg_view") return unary("aten::_neg_view");
  if (op == "aten::view.dtype") {
    return Emit("aten::view.dtype", {NodeArg(updated), NodeArg(Attribute(base_type.tensor().dtype))}, base_type,
                base->name())
        ->result(0);
  }
  if (op == "aten::as_strided") {
    const Storage& storage = storages_[alias.storage];
    if (aliases_[alias.parent].parent >= 0 || !storage.starts_storage) {
      return refuse(
          "as_strided addresses the whole storage, and its input is not a tensor that holds its storage "
          "densely from its start (write through a view of the base instead)");
    }
    MAGI_ASSIGN_OR_RETURN(std::vector<int64_t> view_sizes, IntListArg(view, 1));
    MAGI_ASSIGN_OR_RETURN(std::vector<int64_t> view_strides, IntListArg(view, 2));
    MAGI_ASSIGN_OR_RETURN(int64_t offset, IntArg(view, 3, 0));
    if (view_sizes.size() != view_strides.size()) return refuse("sizes and strides differ in length");
    int64_t last = offset;
    bool empty = false;
    for (size_t i = 0; i < view_sizes.size(); ++i) {
      if (view_sizes[i] == 0) empty = true;
      if (view_strides[i] < 0) return refuse("negative strides");
      last += (view_sizes[i] - 1) * view_strides[i];
    }
    std::optional<int64_t> numel = base_type.tensor().NumElements();
    if (!empty && (!numel.has_value() || offset < 0 || last >= *numel)) {
      return refuse(absl::StrCat("it reaches element ", last, " of a base of ", numel.value_or(-1), " elements"));
    }
    return scatter("aten::as_strided_scatter", {NodeArg(Attribute(view_sizes)), NodeArg(Attribute(view_strides)),
                                                NodeArg(Attribute(offset))});
  }
  if (Is(op, {"aten::expand", "aten::expand_as", "aten::broadcast_to"})) {
    return refuse("several of its elements are one memory location");
  }
  if (op == "aten::unfold") return refuse("its windows overlap in memory");
  return refuse("Magi does not know how to write such a view back into its base");
}

std::vector<std::pair<Value*, Value*>> AliasTracker::WrittenInputs() const {
  std::vector<std::pair<Value*, Value*>> written;
  for (const Storage& storage : storages_) {
    if (storage.input != nullptr && storage.written) written.emplace_back(storage.input, storage.value);
  }
  std::sort(written.begin(), written.end(), [](const auto& a, const auto& b) {
    const auto& inputs = a.first->graph()->inputs();
    return std::find(inputs.begin(), inputs.end(), a.first) < std::find(inputs.begin(), inputs.end(), b.first);
  });
  return written;
}

}  // namespace magi
