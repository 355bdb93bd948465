#include "magi/frontend/python/fx_train_session.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"
#include "magi/frontend/fx/fx_importer.h"
#include "magi/runtime/gloo/gloo_communicator.h"

namespace magi {

absl::StatusOr<std::unique_ptr<FxTrainSession>> FxTrainSession::Create(const std::string& joint_json_path,
                                                                       const FxTrainOptions& options,
                                                                       std::chrono::milliseconds timeout) {
  std::unique_ptr<FxTrainSession> session(new FxTrainSession());
  MAGI_ASSIGN_OR_RETURN(session->env_, DistributedEnvFromEnvironment());
  MAGI_ASSIGN_OR_RETURN(session->store_, ConnectStore(session->env_, timeout));
  MAGI_ASSIGN_OR_RETURN(session->communicator_,
                        CreateGlooCommunicator(session->store_, session->env_.rank, session->env_.world_size, "dp",
                                               timeout));
  MAGI_ASSIGN_OR_RETURN(FxImport imported, ImportFxFile(joint_json_path));
  if (imported.kind != "joint") {
    return absl::InvalidArgumentError(
        absl::StrCat(joint_json_path, " is a ", imported.kind, " graph; training needs a joint graph"));
  }
  MAGI_ASSIGN_OR_RETURN(session->trainer_, FxTrainer::Create(std::move(imported), session->communicator_, options));
  return session;
}

}  // namespace magi
