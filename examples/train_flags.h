// examples:train's own flags (the compile options are compile_flags.h's) and the run they
// describe: TrainFlagsFromCommandLine reads them once, checks every one before any process
// starts, resolves the defaults that depend on --model (--seq_len, --batch_size) and turns
// them into the options the libraries take (model shape, compile, training, AdamW, FSDP,
// mesh). --help lists the flags of train_flags.cc and compile_flags.cc.
//
//   magi::ParseExampleFlags(argc, argv, usage, "examples/train_flags.cc");
//   absl::StatusOr<magi::examples::TrainFlags> flags = magi::examples::TrainFlagsFromCommandLine();
//   magi::models::Llama model(flags->model_config, ...);
#ifndef MAGI_EXAMPLES_TRAIN_FLAGS_H_
#define MAGI_EXAMPLES_TRAIN_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "examples/train_mesh.h"
#include "magi/compiler/compile_options.h"
#include "magi/frontend/fsdp/fully_shard.h"
#include "magi/frontend/fsdp/trainer.h"
#include "magi/models/llama.h"
#include "magi/training/step_options.h"

namespace magi::examples {

// The run examples:train's flags describe, checked, with their defaults resolved.
struct TrainFlags {
  int world_size = 2;                // processes launched locally (--world_size)
  std::string model;                 // --model: tiny, small or 1b
  std::string dtype;                 // --dtype: f32 or bf16
  models::LlamaConfig model_config;  // --model's shape; max_seq_len covers seq_len
  bool random_tokens = false;        // --model=1b trains on seeded random tokens, the others on the text
  bool bf16 = false;                 // --dtype=bf16
  int steps = 0;
  int seq_len = 0;     // --seq_len, or 64 (2048 for --model=1b)
  int batch_size = 0;  // sequences per rank per step: --batch_size, or 8 (4 for --model=1b)
  int untimed_steps = 1;
  int seed = 0;
  bool meta_init = false;  // --init=meta
  std::string device;      // cpu or cuda
  std::string data;        // --data; "": the bundled sonnets (DataPath)
  std::string out_dir, summary_json, trace, kernel_trace, dump_dir, calibration_out, dump_graph;
  bool check_eager = false;
  bool checkpoint = true, resume = false;
  int checkpoint_every = 0, keep_checkpoints = 2;
  // What a resumed run must share with the saving one (CheckpointOptions::config):
  // "model=tiny dtype=f32 seq_len=64 seed=0 data=text".
  std::string checkpoint_config;
  CompileOptions compile;    // compile_flags.h's, --device_profile's default by --device
  TrainingOptions training;  // grad_accum, clip_grad_norm, lr_schedule, init_seed (meta), calibration, ...
  AdamWOptions adamw;        // lr
  FullyShardOptions shard;   // reshard_after_forward, cpu_offload, bf16 mixed precision
  TrainMeshSpec mesh;        // device, communicator, mesh, reshard_after_forward, deterministic, timeout
};

// Reads the flags (after ParseExampleFlags) and checks them: InvalidArgument naming the flag
// for a NaN, infinite or out-of-range number, an unknown --lr_schedule, --device, --model,
// --dtype, --reshard_after_forward or --init, a negative --keep_checkpoints or
// --checkpoint_every, a --grad_accum that does not divide the batch, --dump_dir with
// --init=meta, --check_eager with --resume, and every ValidateCompileFlags refusal. What
// needs the ranks (--mesh, --communicator, a reshard_after_forward=K that does not divide the
// shard axis) is CreateTrainMesh's to check.
absl::StatusOr<TrainFlags> TrainFlagsFromCommandLine();

// The training text: `data` (--data), or the bundled sonnets where `bazel run` (the runfiles
// tree) or the binary's runfiles (`argv0`.runfiles) has them.
std::string DataPath(const std::string& data, const char* argv0);

}  // namespace magi::examples

#endif  // MAGI_EXAMPLES_TRAIN_FLAGS_H_
