// Overflow-checked int64 arithmetic for element and byte counts.
//
// Tensor sizes come from files and flags, so a product of dimensions or a sum of byte
// counts can exceed int64; plain arithmetic would wrap (undefined behaviour) and report a
// nonsense size. These return nullopt instead, and the caller reports which value
// overflowed.
//
//   std::optional<int64_t> bytes = CheckedMul(elements, 4);
//   if (!bytes) return absl::OutOfRangeError(...);
#ifndef MAGI_BASE_CHECKED_MATH_H_
#define MAGI_BASE_CHECKED_MATH_H_

#include <cstdint>
#include <limits>
#include <optional>

namespace magi {

// a + b, or nullopt if the exact sum does not fit in int64.
inline std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

// a * b, or nullopt if the exact product does not fit in int64.
inline std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

// a + b clamped to [INT64_MIN, INT64_MAX]: for totals that are only compared against a
// limit (a bucket's bytes), where "more than any limit" is the right answer.
inline int64_t SaturatingAdd(int64_t a, int64_t b) {
  std::optional<int64_t> sum = CheckedAdd(a, b);
  if (sum) return *sum;
  return b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
}

}  // namespace magi

#endif  // MAGI_BASE_CHECKED_MATH_H_
