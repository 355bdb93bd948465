// Registering a pass under its name, with its options parsed from the textual spec.
//
//   // my_pass.cc (the target is alwayslink = True):
//   MAGI_REGISTER_PASS(MyPass);
//
// registers MyPass::kName; the factory parses the spec's options into MyPass::Options
// (pass_options.h) and returns std::make_unique<MyPass>(options). A pass without an
// `Options` type takes no options: the factory refuses any and default-constructs it.
// Errors name the pass: "bucket-collectives: max_mb must be a non-negative, finite
// number, not 'lots'".
#ifndef MAGI_PASSES_PASS_REGISTRATION_H_
#define MAGI_PASSES_PASS_REGISTRATION_H_

#include <memory>
#include <string>
#include <type_traits>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "magi/passes/pass.h"
#include "magi/passes/pass_options.h"
#include "magi/registry/registry.h"

namespace magi {
namespace pass_registration_internal {

template <typename PassT, typename = void>
struct OptionsOf {
  using type = NoPassOptions;
};
template <typename PassT>
struct OptionsOf<PassT, std::void_t<typename PassT::Options>> {
  using type = typename PassT::Options;
};

}  // namespace pass_registration_internal

// PassT's options type: PassT::Options, or NoPassOptions when it declares none.
template <typename PassT>
using PassOptionsOf = typename pass_registration_internal::OptionsOf<PassT>::type;

// Parses `text` into PassT's options; InvalidArgument naming the pass and the option.
template <typename PassT>
absl::StatusOr<PassOptionsOf<PassT>> ParsePassOptions(const ComponentOptions& text) {
  absl::StatusOr<PassOptionsOf<PassT>> options = PassOptionsOf<PassT>::Parse(text);
  if (!options.ok()) {
    return absl::Status(options.status().code(), absl::StrCat(PassT::kName, ": ", options.status().message()));
  }
  return options;
}

// The registry factory of PassT: parse the options, build the pass.
template <typename PassT>
absl::StatusOr<std::unique_ptr<Pass>> MakeRegisteredPass(const ComponentOptions& text) {
  absl::StatusOr<PassOptionsOf<PassT>> options = ParsePassOptions<PassT>(text);
  if (!options.ok()) return options.status();
  if constexpr (std::is_same_v<PassOptionsOf<PassT>, NoPassOptions>) {
    return std::unique_ptr<Pass>(std::make_unique<PassT>());
  } else {
    return std::unique_ptr<Pass>(std::make_unique<PassT>(*std::move(options)));
  }
}

#define MAGI_REGISTER_PASS(PassT) \
  MAGI_REGISTER(::magi::Pass, std::string(PassT::kName), &::magi::MakeRegisteredPass<PassT>)

}  // namespace magi

#endif  // MAGI_PASSES_PASS_REGISTRATION_H_
