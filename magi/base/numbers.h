// Parsing numbers from flags, pass options and data files.
//
// absl::SimpleAtod accepts "nan", "inf", "-infinity" and values past double's range (as
// infinity); none of them is a meaningful budget, size or rate, and NaN slips through
// every range check (`x <= 0` is false for NaN). Use ParseFiniteDouble for numbers
// people type.
//
//   double gb = 0;
//   if (!ParseFiniteDouble(flag, &gb) || gb <= 0) return Error("a positive, finite number");
#ifndef MAGI_BASE_NUMBERS_H_
#define MAGI_BASE_NUMBERS_H_

#include <cmath>
#include <cstdint>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"

namespace magi {

// Parses a decimal number; false (and *out untouched) unless it is finite.
inline bool ParseFiniteDouble(absl::string_view text, double* out) {
  double value = 0;
  if (!absl::SimpleAtod(text, &value) || !std::isfinite(value)) return false;
  *out = value;
  return true;
}

// A non-negative byte count given as a double (a budget in GB times 1e9), rounded down;
// nullopt if it is negative, NaN or does not fit in int64.
inline std::optional<int64_t> BytesFromDouble(double bytes) {
  if (!(bytes >= 0) || bytes >= 9223372036854775808.0) return std::nullopt;  // 2^63
  return static_cast<int64_t>(bytes);
}

}  // namespace magi

#endif  // MAGI_BASE_NUMBERS_H_
