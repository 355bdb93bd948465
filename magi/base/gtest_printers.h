// GoogleTest printers for Abseil types that gtest cannot print readably on its own.
// Debian's Abseil has its own absl::string_view (not std::string_view), which gtest
// would print byte by byte; include this in tests that compare status messages.
#ifndef MAGI_BASE_GTEST_PRINTERS_H_
#define MAGI_BASE_GTEST_PRINTERS_H_

#include <ostream>

#include "absl/strings/string_view.h"

namespace absl {

inline void PrintTo(absl::string_view text, std::ostream* os) { *os << '"' << text << '"'; }

}  // namespace absl

#endif  // MAGI_BASE_GTEST_PRINTERS_H_
