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
