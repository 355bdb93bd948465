// SHA-256 (FIPS 180-4) of a byte string, as lowercase hex: the inductor backend names its
// cached AOTInductor packages by the hash of everything that determines the generated
// code, so the name must be stable across processes, builds and machines (absl::Hash is
// not: it is seeded per build).
//
//   std::string key = Sha256Hex("magi-inductor-v1\n" + structural_key);   // 64 hex digits
#ifndef MAGI_BACKEND_INDUCTOR_SHA256_H_
#define MAGI_BACKEND_INDUCTOR_SHA256_H_

#include <string>

#include "absl/strings/string_view.h"

namespace magi::inductor {

std::string Sha256Hex(absl::string_view data);

}  // namespace magi::inductor

#endif  // MAGI_BACKEND_INDUCTOR_SHA256_H_
