#include "magi/compat/torch_status.h"

#include <c10/util/Exception.h>

#include <exception>
#include <new>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace magi::compat {

bool CaughtException::out_of_memory() const {
  switch (kind) {
    case Kind::kTorchOutOfMemory:
    case Kind::kBadAlloc:
      return true;
    case Kind::kTorch:
      return absl::StrContains(message, "can't allocate memory");
    case Kind::kStd:
      return false;
  }
  return false;
}

absl::Status ToStatus(const CaughtException& caught, absl::string_view what, absl::StatusCode code) {
  if (code == absl::StatusCode::kOk) code = absl::StatusCode::kInternal;
  return absl::Status(code, what.empty() ? caught.message : absl::StrCat(what, ": ", caught.message));
}

namespace internal {

// The catch clauses of the whole code base (tools/check_no_catch.sh): the most derived
// first.
CaughtException DescribeCurrentException() {
  try {
    throw;
  } catch (const c10::OutOfMemoryError& error) {
    return {CaughtException::Kind::kTorchOutOfMemory, error.what_without_backtrace()};
  } catch (const c10::Error& error) {
    return {CaughtException::Kind::kTorch, error.what_without_backtrace()};
  } catch (const std::bad_alloc& error) {
    return {CaughtException::Kind::kBadAlloc, error.what()};
  } catch (const std::exception& error) {
    return {CaughtException::Kind::kStd, error.what()};
  }
  // Anything else propagates from the `throw;` above.
}

}  // namespace internal
}  // namespace magi::compat
