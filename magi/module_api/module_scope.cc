#include "magi/module_api/module_scope.h"

namespace magi {
namespace {

std::string& ThreadPath() {
  thread_local std::string path;
  return path;
}

}  // namespace

ScopedModulePath::ScopedModulePath(const std::string& name) : previous_length_(ThreadPath().size()) {
  if (name.empty()) return;
  std::string& path = ThreadPath();
  if (!path.empty()) path += '.';
  path += name;
}

ScopedModulePath::~ScopedModulePath() { ThreadPath().resize(previous_length_); }

const std::string& CurrentModulePath() { return ThreadPath(); }

}  // namespace magi
