// Early-return helpers for absl::Status and absl::StatusOr, in the style of
// TensorFlow's TF_RETURN_IF_ERROR / TF_ASSIGN_OR_RETURN.
#ifndef MAGI_BASE_STATUS_MACROS_H_
#define MAGI_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define MAGI_RETURN_IF_ERROR(expr)                   \
  do {                                               \
    ::absl::Status magi_status_ = (expr);            \
    if (!magi_status_.ok()) return magi_status_;     \
  } while (0)

#define MAGI_STATUS_CONCAT_INNER_(a, b) a##b
#define MAGI_STATUS_CONCAT_(a, b) MAGI_STATUS_CONCAT_INNER_(a, b)

// MAGI_ASSIGN_OR_RETURN(auto x, Foo()); declares x from Foo()'s value or returns its status.
#define MAGI_ASSIGN_OR_RETURN(lhs, expr) \
  MAGI_ASSIGN_OR_RETURN_IMPL_(MAGI_STATUS_CONCAT_(magi_statusor_, __LINE__), lhs, expr)

#define MAGI_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                \
  if (!statusor.ok()) return statusor.status();          \
  lhs = std::move(statusor).value()

#endif  // MAGI_BASE_STATUS_MACROS_H_
