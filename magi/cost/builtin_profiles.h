// The profiles of magi/cost/profiles, compiled in by a genrule (builtin_profiles.cc).
#ifndef MAGI_COST_BUILTIN_PROFILES_H_
#define MAGI_COST_BUILTIN_PROFILES_H_

#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace magi::internal {

// (name, file text) per profile, sorted by name.
const std::vector<std::pair<absl::string_view, absl::string_view>>& BuiltinProfileTexts();

}  // namespace magi::internal

#endif  // MAGI_COST_BUILTIN_PROFILES_H_
