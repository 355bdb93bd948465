// Compiles a training or inference step for a LibTorch-facing trainer: magi/compiler's
// Compile, then a check that the primary backend's executable runs LibTorch tensors
// (a TorchExecutable). The trainers of both frontends (FsdpTrainer and FsdpInference on
// captured graphs, FxTrainer on imported ones) compile through it.
//
//   TorchExecutable* executable = nullptr;
//   absl::StatusOr<CompiledStep> compiled = CompileForTorch(std::move(module), "train_step", options, &executable);
#ifndef MAGI_TRAINING_COMPILE_FOR_TORCH_H_
#define MAGI_TRAINING_COMPILE_FOR_TORCH_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "magi/backend/torch_executable.h"
#include "magi/compiler/compiler.h"
#include "magi/ir/module.h"

namespace magi {

// Compiles graph `graph_name` of `module` (taken over) with `options`. On success
// `*executable` (never null) points into the returned CompiledStep's executable;
// FailedPrecondition naming the backend when that executable does not run LibTorch tensors.
absl::StatusOr<CompiledStep> CompileForTorch(std::unique_ptr<Module> module, const std::string& graph_name,
                                             const CompileOptions& options, TorchExecutable** executable);

}  // namespace magi

#endif  // MAGI_TRAINING_COMPILE_FOR_TORCH_H_
