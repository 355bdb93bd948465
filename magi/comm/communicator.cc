#include "magi/comm/communicator.h"

#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"
#include "magi/registry/registry.h"

namespace magi {

absl::StatusOr<std::shared_ptr<Communicator>> CreateCommunicator(absl::string_view name,
                                                                 const CommunicatorOptions& options) {
  if (options.store.get() == nullptr) return absl::InvalidArgumentError("CreateCommunicator: no rendezvous store");
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("CreateCommunicator: rank ", options.rank, " is outside a group of ", options.size));
  }
  MAGI_ASSIGN_OR_RETURN(std::unique_ptr<CommunicatorProvider> provider,
                        Registry<CommunicatorProvider>::Global().Create(name));
  return provider->Create(options);
}

absl::StatusOr<std::string> DefaultCommunicatorFor(absl::string_view device_type) {
  if (device_type == "cpu") return std::string("gloo");
  if (device_type == "cuda") return std::string("nccl");
  return absl::InvalidArgumentError(absl::StrCat("no default communicator for device '", device_type, "'"));
}

}  // namespace magi
