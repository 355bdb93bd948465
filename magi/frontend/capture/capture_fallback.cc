// The boxed fallback on compat::kCaptureKey. It only sees ops while a CaptureScope
// includes the key in the thread-local dispatch set (autograd's workers inherit it).
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "magi/compat/torch_compat.h"
#include "magi/frontend/capture/capture_session.h"

namespace magi {
namespace {

void CaptureFallback(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  c10::DispatchKeySet below = keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, compat::kCaptureKey);
  CaptureSession* session = CaptureSession::Current();
  // Ops that autograd decomposes are not recorded: their parts come back through here.
  if (session == nullptr || compat::DecomposesAtAutograd(op, keys)) {
    op.redispatchBoxed(below, stack);
    return;
  }
  session->Record(op, below, stack);
}

static_assert(compat::kCaptureKey == c10::DispatchKey::TESTING_ONLY_GenericMode,
              "the fallback must be registered on compat::kCaptureKey");

TORCH_LIBRARY_IMPL(_, TESTING_ONLY_GenericMode, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&CaptureFallback>());
}

}  // namespace
}  // namespace magi
