// The registry through which Magi finds components by name: passes ("pass"), backends
// ("backend") and communicators ("communicator"). Cost models are not registered: device
// profiles are data (magi/cost/profiles, or a file), loaded by name or path; frontends are
// libraries a program links and calls.
//
// Each interface type T (Pass, Backend, ...) declares `static constexpr
// absl::string_view kRegistryKind = "pass";` and gets one process-wide
// Registry<T>::Global(), a function-local static that is never destroyed. Every
// Registry<T> also enters itself in one index (AllRegistries), so tools list every
// registered component of every kind in one place.
//
// Registration is explicit (`Registry<Pass>::Global().Register(...)`) or through a
// static MAGI_REGISTER object; a target that registers statically must be
// `alwayslink = True` so the linker keeps the object.
//
//   MAGI_REGISTER(Pass, "dce", [](const ComponentOptions&) -> absl::StatusOr<std::unique_ptr<Pass>> {
//     return std::make_unique<DeadCodeElimination>();
//   });
//   absl::StatusOr<std::unique_ptr<Pass>> pass = Registry<Pass>::Global().Create("dce");
//
// (Passes write MAGI_REGISTER_PASS(DeadCodeElimination) instead, which makes this factory
// from the pass's typed options: magi/passes/pass_registration.h.)
//
// A duplicate name is a programmer error (MAGI_CHECK). An unknown name is NotFound
// and lists the registered names.
#ifndef MAGI_REGISTRY_REGISTRY_H_
#define MAGI_REGISTRY_REGISTRY_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "magi/base/check.h"

namespace magi {

// Options given to a factory, as written in a textual spec: dce{foo=1} gives {"foo": "1"}.
using ComponentOptions = std::map<std::string, std::string>;

namespace registry_internal {

// Lists the names registered in one Registry<T>.
using NameLister = std::function<std::vector<std::string>()>;
// Enters a registry kind in the global index; called once per T.
void AddToIndex(absl::string_view kind, NameLister lister);

}  // namespace registry_internal

// Splits a component spec as flags and pipelines write it, "name" or
// "name{key=value,key=value}" (names and values of [A-Za-z0-9_.+-]), into the name and
// its options. InvalidArgument with the column on malformed text.
absl::StatusOr<std::pair<std::string, ComponentOptions>> ParseComponentSpec(absl::string_view spec);

// Every registry kind with its sorted names, e.g. {"pass": ["cse", "dce"], ...}.
std::map<std::string, std::vector<std::string>> AllRegistries();

template <typename T>
class Registry {
 public:
  using Factory = std::function<absl::StatusOr<std::unique_ptr<T>>(const ComponentOptions&)>;

  static Registry& Global() {
    static Registry* registry = [] {
      auto* r = new Registry();
      registry_internal::AddToIndex(T::kRegistryKind, [r] { return r->Names(); });
      return r;
    }();
    return *registry;
  }

  // Registers `factory` under `name`; aborts if the name is taken.
  void Register(std::string name, Factory factory) {
    absl::MutexLock lock(&mutex_);
    MAGI_CHECK(!name.empty()) << "empty " << T::kRegistryKind << " name";
    bool inserted = factories_.emplace(name, std::move(factory)).second;
    MAGI_CHECK(inserted) << T::kRegistryKind << " '" << name << "' is registered twice";
  }

  bool Contains(absl::string_view name) const {
    absl::MutexLock lock(&mutex_);
    return factories_.find(std::string(name)) != factories_.end();
  }

  // Builds the component called `name`; NotFound lists what exists.
  absl::StatusOr<std::unique_ptr<T>> Create(absl::string_view name, const ComponentOptions& options = {}) const {
    Factory factory;
    {
      absl::MutexLock lock(&mutex_);
      auto it = factories_.find(std::string(name));
      if (it == factories_.end()) {
        std::vector<std::string> names;
        for (const auto& entry : factories_) names.push_back(entry.first);
        return absl::NotFoundError(absl::StrCat("unknown ", T::kRegistryKind, " '", name, "'; registered: ",
                                                names.empty() ? "(none)" : absl::StrJoin(names, ", ")));
      }
      factory = it->second;
    }
    return factory(options);
  }

  // Registered names, sorted.
  std::vector<std::string> Names() const {
    absl::MutexLock lock(&mutex_);
    std::vector<std::string> names;
    for (const auto& entry : factories_) names.push_back(entry.first);
    return names;
  }

 private:
  Registry() = default;
  mutable absl::Mutex mutex_;
  std::map<std::string, Factory> factories_ ABSL_GUARDED_BY(mutex_);
};

// Registers a factory from a static initializer (see MAGI_REGISTER).
template <typename T>
struct Registrar {
  Registrar(std::string name, typename Registry<T>::Factory factory) {
    Registry<T>::Global().Register(std::move(name), std::move(factory));
  }
};

#define MAGI_REGISTRY_CONCAT_INNER_(a, b) a##b
#define MAGI_REGISTRY_CONCAT_(a, b) MAGI_REGISTRY_CONCAT_INNER_(a, b)
#define MAGI_REGISTER(Interface, name, factory)                                                 \
  static ::magi::Registrar<Interface> MAGI_REGISTRY_CONCAT_(magi_registrar_, __COUNTER__)( \
      name, factory)

}  // namespace magi

#endif  // MAGI_REGISTRY_REGISTRY_H_
