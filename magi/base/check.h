// Invariant checks for programmer errors.
//
// MAGI_CHECK(cond) << "context"; aborts with file:line and the message when `cond`
// is false. It is for broken invariants only (a duplicate registration, an index
// out of range inside the IR): anything that bad input can cause returns an
// absl::Status instead. The Abseil version on Debian 12 has no absl/log, hence this.
#ifndef MAGI_BASE_CHECK_H_
#define MAGI_BASE_CHECK_H_

#include <sstream>
#include <string>

namespace magi::internal {

// Collects the message of a failed check and aborts in its destructor.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets `cond ? (void)0 : Voidify() & stream << ...` type-check.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace magi::internal

#define MAGI_CHECK(condition)                 \
  (condition) ? (void)0                       \
              : ::magi::internal::Voidify() & \
                    ::magi::internal::CheckFailure(__FILE__, __LINE__, #condition).stream()

#endif  // MAGI_BASE_CHECK_H_
