#include "magi/registry/registry.h"

namespace magi {
namespace registry_internal {
namespace {

struct Index {
  absl::Mutex mutex;
  std::map<std::string, NameLister> kinds ABSL_GUARDED_BY(mutex);
};

Index& GlobalIndex() {
  static Index* index = new Index();  // never destroyed: registries outlive static destructors
  return *index;
}

}  // namespace

void AddToIndex(absl::string_view kind, NameLister lister) {
  Index& index = GlobalIndex();
  absl::MutexLock lock(&index.mutex);
  bool inserted = index.kinds.emplace(std::string(kind), std::move(lister)).second;
  MAGI_CHECK(inserted) << "two registries share the kind '" << kind << "'";
}

}  // namespace registry_internal

absl::StatusOr<std::pair<std::string, ComponentOptions>> ParseComponentSpec(absl::string_view spec) {
  size_t pos = 0;
  auto is_name_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
           c == '.' || c == '+';
  };
  auto name = [&] {
    size_t start = pos;
    while (pos < spec.size() && is_name_char(spec[pos])) ++pos;
    return std::string(spec.substr(start, pos - start));
  };
  auto error = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("component spec '", spec, "', column ", pos + 1, ": ", what));
  };
  std::pair<std::string, ComponentOptions> parsed;
  parsed.first = name();
  if (parsed.first.empty()) return error("expected a name");
  if (pos < spec.size() && spec[pos] == '{') {
    ++pos;
    while (pos < spec.size() && spec[pos] != '}') {
      std::string key = name();
      if (key.empty()) return error("expected an option name");
      if (pos >= spec.size() || spec[pos] != '=') return error(absl::StrCat("expected '=' after '", key, "'"));
      ++pos;
      std::string value = name();
      if (value.empty()) return error(absl::StrCat("expected a value for '", key, "'"));
      if (!parsed.second.emplace(key, value).second) return error(absl::StrCat("option '", key, "' twice"));
      if (pos < spec.size() && spec[pos] == ',') ++pos;
    }
    if (pos >= spec.size()) return error("expected '}'");
    ++pos;
  }
  if (pos != spec.size()) return error("unexpected text after the spec");
  return parsed;
}

std::map<std::string, std::vector<std::string>> AllRegistries() {
  registry_internal::Index& index = registry_internal::GlobalIndex();
  std::map<std::string, registry_internal::NameLister> kinds;
  {
    absl::MutexLock lock(&index.mutex);
    kinds = index.kinds;
  }
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& [kind, lister] : kinds) out[kind] = lister();
  return out;
}

}  // namespace magi
