// One rank of magi.train (magi/frontend/python/src/magi/_train.py): the joint graph file
// tools/fx_export.py wrote for a Python nn.Module, trained by FxTrainer (FSDP + AdamW) over
// a Gloo communicator of the launcher's processes (torchrun: RANK, WORLD_SIZE, MASTER_*;
// nothing set: one process).
//
//   FxTrainOptions options;   // shard groups, AdamW, backend, passes, partitions, ...
//   absl::StatusOr<std::unique_ptr<FxTrainSession>> session = FxTrainSession::Create(path, options);
//   absl::StatusOr<double> loss = (*session)->trainer().Step(batch);
//
// What it does NOT do: trace the model (the Python side exports it), make batches, or
// run on CUDA (Gloo on CPU tensors only).
#ifndef MAGI_FRONTEND_PYTHON_FX_TRAIN_SESSION_H_
#define MAGI_FRONTEND_PYTHON_FX_TRAIN_SESSION_H_

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "magi/comm/communicator.h"
#include "magi/frontend/fx/fx_trainer.h"
#include "magi/runtime/distributed/rendezvous.h"

namespace magi {

class FxTrainSession {
 public:
  // Connects this process to the others (the rendezvous store, then a Gloo group "dp"),
  // imports `joint_json_path` and compiles it for this rank. `timeout` bounds the
  // rendezvous and every collective.
  static absl::StatusOr<std::unique_ptr<FxTrainSession>> Create(const std::string& joint_json_path,
                                                                const FxTrainOptions& options,
                                                                std::chrono::milliseconds timeout);

  FxTrainer& trainer() { return *trainer_; }
  const DistributedEnv& env() const { return env_; }

 private:
  FxTrainSession() = default;
  DistributedEnv env_;
  // The store outlives the group: rank 0's is the server the other ranks still read from.
  c10::intrusive_ptr<c10d::Store> store_;
  std::shared_ptr<Communicator> communicator_;
  std::unique_ptr<FxTrainer> trainer_;
};

}  // namespace magi

#endif  // MAGI_FRONTEND_PYTHON_FX_TRAIN_SESSION_H_
