// The one boundary where a dependency's exceptions become absl::Status. LibTorch throws
// c10::Error (a failed TORCH_CHECK, a kernel's shape error, a device allocator's
// c10::OutOfMemoryError); its serializer and Gloo throw std::exception; the host's
// allocator throws std::bad_alloc. Magi's APIs return Status instead, so every call that
// may throw goes through CallTorch here, and no other file under magi/ or examples/ has a
// `catch` (tools/check_no_catch.sh checks that in CI).
//
//   // InternalError("splitting state entry w: <LibTorch's message>") if it throws:
//   absl::Status split = compat::CallTorch(absl::StrCat("splitting state entry ", name),
//                                          [&] { halves = SplitTensorToBf16(tensor); });
//   // A value: StatusOr<at::Tensor>.
//   absl::StatusOr<at::Tensor> moved = compat::CallTorch("moving x", [&] { return x.to(device); });
//   // On a hot path, the context made only when something is thrown:
//   MAGI_RETURN_IF_ERROR(compat::CallTorchLazy([&] { return Where(node); }, [&] { op.callBoxed(&stack); }));
//   // Another code, or a message of its own: map the caught exception.
//   absl::Status pinned = compat::CallTorchWith([&] { state = state.pin_memory(); },
//                                               [](const compat::CaughtException& caught) {
//                                                 return absl::ResourceExhaustedError(caught.message);
//                                               });
//
// f may return void (-> absl::Status), absl::Status, absl::StatusOr<T> (both passed through
// as they are when nothing is thrown) or a value T (-> absl::StatusOr<T>). The message of a
// c10::Error is what_without_backtrace() (the C++ backtrace is for LibTorch's developers,
// not for a Status that names what Magi was doing); of any other std::exception, what().
//
// What it does NOT catch: exceptions that are not std::exceptions (they propagate as
// before), and exceptions thrown by the mapper itself. It does not retry, log or clear a
// device's error state: the caller decides (e.g. cudaGetLastError after a failed kernel).
#ifndef MAGI_COMPAT_TORCH_STATUS_H_
#define MAGI_COMPAT_TORCH_STATUS_H_

#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace magi::compat {

// An exception CallTorch caught, as a value.
struct CaughtException {
  enum class Kind {
    kTorch,             // c10::Error (any subclass but the next)
    kTorchOutOfMemory,  // c10::OutOfMemoryError (a device allocator's)
    kBadAlloc,          // std::bad_alloc (the host's allocator)
    kStd,               // any other std::exception (iostream errors, std::out_of_range, Gloo's)
  };
  Kind kind = Kind::kStd;
  // c10::Error::what_without_backtrace(), else std::exception::what().
  std::string message;

  // Thrown by LibTorch (a c10::Error of any kind).
  bool from_torch() const { return kind == Kind::kTorch || kind == Kind::kTorchOutOfMemory; }
  // An allocation failed: c10::OutOfMemoryError, std::bad_alloc, or the CPU allocator's
  // plain c10::Error ("DefaultCPUAllocator: can't allocate memory", which LibTorch 1.13
  // raises without the OOM subclass).
  bool out_of_memory() const;
};

// "what: message" (the message alone when `what` is empty), with `code`.
absl::Status ToStatus(const CaughtException& caught, absl::string_view what,
                      absl::StatusCode code = absl::StatusCode::kInternal);

namespace internal {

// The exception being handled, described; rethrows one that is not a std::exception. Call
// only inside a catch block.
CaughtException DescribeCurrentException();

template <typename R>
struct StatusFor {
  using type = absl::StatusOr<R>;
};
template <>
struct StatusFor<void> {
  using type = absl::Status;
};
template <>
struct StatusFor<absl::Status> {
  using type = absl::Status;
};
template <typename T>
struct StatusFor<absl::StatusOr<T>> {
  using type = absl::StatusOr<T>;
};

template <typename F>
using StatusOfCall = typename StatusFor<std::decay_t<std::invoke_result_t<F&>>>::type;

}  // namespace internal

// Calls f(); if it throws a std::exception, returns on_exception(CaughtException), which
// must return a non-OK absl::Status (an OK one becomes InternalError with the exception's
// message: an exception is never success).
template <typename F, typename OnException>
internal::StatusOfCall<F> CallTorchWith(F&& f, OnException&& on_exception) {
  using Result = internal::StatusOfCall<F>;
  try {
    if constexpr (std::is_void_v<std::invoke_result_t<F&>>) {
      f();
      return absl::OkStatus();
    } else {
      return Result(f());
    }
  } catch (...) {
    const CaughtException caught = internal::DescribeCurrentException();
    absl::Status status = on_exception(caught);
    if (status.ok()) status = absl::InternalError(caught.message);
    return Result(std::move(status));
  }
}

// Calls f(); a thrown std::exception becomes ToStatus(caught, what, code).
template <typename F>
internal::StatusOfCall<F> CallTorch(absl::StatusCode code, absl::string_view what, F&& f) {
  return CallTorchWith(std::forward<F>(f), [&](const CaughtException& caught) { return ToStatus(caught, what, code); });
}

// Calls f(); a thrown std::exception becomes InternalError("what: message").
template <typename F>
internal::StatusOfCall<F> CallTorch(absl::string_view what, F&& f) {
  return CallTorch(absl::StatusCode::kInternal, what, std::forward<F>(f));
}

// As CallTorch, with the context made only when something is thrown: `what` is a callable
// returning it (a string), for hot paths where building it on every call would cost (an
// op's Where(node) on each call of a step).
template <typename What, typename F>
internal::StatusOfCall<F> CallTorchLazy(What&& what, F&& f) {
  return CallTorchWith(std::forward<F>(f), [&](const CaughtException& caught) { return ToStatus(caught, what()); });
}

}  // namespace magi::compat

#endif  // MAGI_COMPAT_TORCH_STATUS_H_
