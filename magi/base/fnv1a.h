// 64-bit FNV-1a: a hash that is the same on every host, build and run, for keys written
// to disk or compared across ranks (plan hashes, calibration keys of partitions). Not for
// hash tables (absl::Hash is) nor against adversaries.
#ifndef MAGI_BASE_FNV1A_H_
#define MAGI_BASE_FNV1A_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace magi {

inline uint64_t Fnv1a64(absl::string_view text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

// Fnv1a64 as 16 lowercase hex digits.
inline std::string Fnv1a64Hex(absl::string_view text) { return absl::StrFormat("%016x", Fnv1a64(text)); }

}  // namespace magi

#endif  // MAGI_BASE_FNV1A_H_
