#include "magi/frontend/common/functional_variants.h"

#include <mutex>
#include <string>
#include <unordered_map>

namespace magi {
namespace {

// The argument signature that must match: (name, type) of every non-out argument.
std::vector<std::pair<std::string, std::string>> Signature(const c10::FunctionSchema& schema) {
  std::vector<std::pair<std::string, std::string>> signature;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    if (IsOutArgument(schema, i)) continue;
    const c10::Argument& argument = schema.arguments()[i];
    signature.emplace_back(argument.name(), argument.type()->str());
  }
  return signature;
}

std::string BaseName(const std::string& name) {
  return !name.empty() && name.back() == '_' ? name.substr(0, name.size() - 1) : name;
}

}  // namespace

std::vector<size_t> MutatedArguments(const c10::FunctionSchema& schema) {
  std::vector<size_t> mutated;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const c10::AliasInfo* alias = schema.arguments()[i].alias_info();
    if (alias != nullptr && alias->isWrite()) mutated.push_back(i);
  }
  return mutated;
}

bool IsOutArgument(const c10::FunctionSchema& schema, size_t i) {
  const c10::Argument& argument = schema.arguments()[i];
  return argument.kwarg_only() && argument.alias_info() != nullptr && argument.alias_info()->isWrite();
}

c10::optional<c10::OperatorHandle> FindFunctionalVariant(const c10::OperatorHandle& op) {
  static std::mutex mutex;
  static auto* by_base_name = new std::unordered_map<std::string, std::vector<c10::OperatorName>>();
  static auto* cache = new std::unordered_map<std::string, c10::optional<c10::OperatorHandle>>();
  const c10::FunctionSchema& schema = op.schema();
  if (MutatedArguments(schema).empty()) return c10::nullopt;
  std::string key = schema.name() + "." + schema.overload_name();
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache->find(key); it != cache->end()) return it->second;
  if (by_base_name->empty()) {
    for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
      (*by_base_name)[name.name].push_back(name);
    }
  }
  c10::optional<c10::OperatorHandle> found;
  auto wanted = Signature(schema);
  auto candidates = by_base_name->find(BaseName(schema.name()));
  if (candidates != by_base_name->end()) {
    for (const c10::OperatorName& name : candidates->second) {
      c10::optional<c10::OperatorHandle> candidate = c10::Dispatcher::singleton().findSchema(name);
      if (!candidate || !candidate->hasSchema()) continue;
      const c10::FunctionSchema& other = candidate->schema();
      if (!MutatedArguments(other).empty() || other.is_vararg()) continue;
      if (Signature(other) == wanted) {
        found = candidate;
        break;
      }
    }
  }
  (*cache)[key] = found;
  return found;
}

namespace {

// The alias sets an argument or return belongs to (a list's element sets for `Tensor(a)[]`).
std::vector<c10::Symbol> AliasSets(const c10::AliasInfo* info) {
  std::vector<c10::Symbol> sets;
  if (info == nullptr) return sets;
  for (const c10::Symbol& set : info->beforeSets()) {
    if (set != c10::AliasInfo::wildcardSet()) sets.push_back(set);
  }
  for (const c10::AliasInfo& contained : info->containedTypes()) {
    for (const c10::Symbol& set : contained.beforeSets()) {
      if (set != c10::AliasInfo::wildcardSet()) sets.push_back(set);
    }
  }
  return sets;
}

bool IsWrite(const c10::AliasInfo* info) {
  if (info == nullptr) return false;
  if (info->isWrite()) return true;
  for (const c10::AliasInfo& contained : info->containedTypes()) {
    if (contained.isWrite()) return true;
  }
  return false;
}

}  // namespace

std::vector<int> ViewSources(const c10::FunctionSchema& schema) {
  // Views whose schemas carry no alias annotation ("unsafe": autograd does not track them
  // as views), but whose results share the input's memory all the same.
  static const auto* unannotated = new std::vector<std::string>{
      "aten::_unsafe_view", "aten::unsafe_split", "aten::unsafe_split_with_sizes", "aten::unsafe_chunk"};
  for (const std::string& name : *unannotated) {
    if (schema.name() == name) return std::vector<int>(schema.returns().size(), 0);
  }
  std::vector<int> sources;
  for (const c10::Argument& ret : schema.returns()) {
    int source = -1;
    if (!IsWrite(ret.alias_info())) {
      for (const c10::Symbol& set : AliasSets(ret.alias_info())) {
        for (size_t i = 0; i < schema.arguments().size() && source < 0; ++i) {
          for (const c10::Symbol& arg_set : AliasSets(schema.arguments()[i].alias_info())) {
            if (arg_set == set) source = static_cast<int>(i);
          }
        }
      }
    }
    sources.push_back(source);
  }
  return sources;
}

bool MayOrMayNotAlias(const c10::FunctionSchema& schema) {
  static const auto* names = new std::vector<std::string>{
      "aten::reshape", "aten::reshape_as", "aten::contiguous", "aten::to", "aten::flatten", "aten::ravel",
      "aten::resolve_conj", "aten::resolve_neg", "aten::cpu", "aten::cuda", "aten::pin_memory", "aten::coalesce",
      "aten::_autocast_to_full_precision", "aten::_autocast_to_reduced_precision", "aten::as_tensor",
      "aten::conj", "aten::tensor_split", "aten::type_as"};
  for (const std::string& name : *names) {
    if (schema.name() == name) return true;
  }
  return false;
}

}  // namespace magi
