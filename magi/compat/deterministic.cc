#include "magi/compat/deterministic.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Dispatch.h>

#include <limits>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace magi::compat {
namespace {

// Members that only some LibTorch versions have, detected instead of version-tested.
template <typename C, typename = void>
struct HasDeterministicMkldnn : std::false_type {};
template <typename C>
struct HasDeterministicMkldnn<C, std::void_t<decltype(std::declval<C&>().setDeterministicMkldnn(true))>>
    : std::true_type {};

template <typename C, typename = void>
struct HasFillUninitializedMemory : std::false_type {};
template <typename C>
struct HasFillUninitializedMemory<C, std::void_t<decltype(std::declval<C&>().deterministicFillUninitializedMemory())>>
    : std::true_type {};

template <typename C>
void SetMkldnn(C& context, bool on) {
  if constexpr (HasDeterministicMkldnn<C>::value) context.setDeterministicMkldnn(on);
}

template <typename C>
bool MkldnnOn(const C& context) {
  if constexpr (HasDeterministicMkldnn<C>::value) {
    return context.deterministicMkldnn();
  } else {
    return true;  // nothing to switch
  }
}

template <typename C>
const char* MkldnnNote(const C& context) {
  if constexpr (HasDeterministicMkldnn<C>::value) {
    return context.deterministicMkldnn() ? ", mkldnn deterministic" : "";
  } else {
    return "";
  }
}

template <typename C>
const char* FillNote(const C& context) {
  if constexpr (HasFillUninitializedMemory<C>::value) {
    return context.deterministicFillUninitializedMemory() ? ", fill uninitialized memory"
                                                          : ", empty ops' results filled by Magi";
  } else {
    return ", empty ops' results filled by Magi";
  }
}

template <typename C>
void SetFillUninitializedMemory(C& context, bool on) {
  if constexpr (HasFillUninitializedMemory<C>::value) context.setDeterministicFillUninitializedMemory(on);
}

}  // namespace

void SetDeterministicAlgorithms(bool on, bool fill_every_allocation) {
  at::Context& context = at::globalContext();
  context.setDeterministicAlgorithms(on, /*warn_only=*/false);
  context.setDeterministicCuDNN(on);
  context.setBenchmarkCuDNN(!on && context.benchmarkCuDNN());
  SetMkldnn(context, on);
  // Off in deterministic mode (the header says why) unless asked for; LibTorch's default
  // (on) otherwise.
  SetFillUninitializedMemory(context, !on || fill_every_allocation);
}

void FillUninitialized(at::Tensor& tensor) {
  if (!tensor.defined() || tensor.numel() == 0) return;
  if (tensor.is_floating_point() || tensor.is_complex()) {
    tensor.fill_(std::numeric_limits<double>::quiet_NaN());
  } else if (tensor.scalar_type() == at::kBool) {
    tensor.fill_(true);
  } else if (at::isQIntType(tensor.scalar_type())) {
    return;  // quantized: LibTorch does not fill these either
  } else if (!at::isSignedType(tensor.scalar_type())) {
    tensor.zero_().bitwise_not_();  // unsigned (uint8, and 2.3+'s uint16/32/64): every bit set is the maximum
  } else {
    AT_DISPATCH_INTEGRAL_TYPES(tensor.scalar_type(), "FillUninitialized",
                               [&] { tensor.fill_(std::numeric_limits<scalar_t>::max()); });
  }
}

bool DeterministicAlgorithmsOn() { return at::globalContext().deterministicAlgorithms(); }

DeterministicAlgorithmsSuspended::DeterministicAlgorithmsSuspended()
    : was_on_(at::globalContext().deterministicAlgorithms()),
      was_warn_only_(at::globalContext().deterministicAlgorithmsWarnOnly()) {
  if (was_on_) at::globalContext().setDeterministicAlgorithms(false, /*warn_only=*/false);
}

DeterministicAlgorithmsSuspended::~DeterministicAlgorithmsSuspended() {
  if (was_on_) at::globalContext().setDeterministicAlgorithms(true, was_warn_only_);
}

bool DeterministicAlgorithmsEnabled() {
  const at::Context& context = at::globalContext();
  return context.deterministicAlgorithms() && !context.deterministicAlgorithmsWarnOnly() &&
         context.deterministicCuDNN() && !context.benchmarkCuDNN() && MkldnnOn(context);
}

std::string DescribeDeterministicAlgorithms() {
  const at::Context& context = at::globalContext();
  if (!context.deterministicAlgorithms()) return "aten deterministic algorithms off";
  return std::string("aten deterministic") + (context.deterministicAlgorithmsWarnOnly() ? " (warnings)" : " (errors)") +
         (context.deterministicCuDNN() ? ", cudnn deterministic" : "") +
         (context.benchmarkCuDNN() ? ", cudnn benchmark ON" : ", no cudnn benchmark") + MkldnnNote(context) +
         FillNote(context);
}

absl::Status CheckDeterministicAlgorithms(absl::string_view backend) {
  if (DeterministicAlgorithmsEnabled()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "backend '", backend, "' was asked for a deterministic step, but this process runs with ",
      DescribeDeterministicAlgorithms(),
      ": call magi::EnableDeterministicMode() (magi/runtime/deterministic) before anything runs"));
}

}  // namespace magi::compat
