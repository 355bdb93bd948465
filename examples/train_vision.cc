// Trains a torchvision classifier imported from PyTorch's FX with FSDP, on local processes,
// on a procedurally generated 10-class image dataset (examples/shapes_dataset.h).
//
//   tools/bazel run //examples:train_vision                 # 2 CPU processes (Gloo)
//   tools/bazel run //examples:train_vision -- --world_size=1 --steps=300 --lr_schedule=constant
//
// The model is exported at build time by the configured PyTorch (tools/fx_export.py with
// --spec tools.fx_models:train_vision, genrules in examples/BUILD): a joint graph (forward,
// cross-entropy loss and backward, BatchNorm in training mode) and a forward graph (eval
// mode). The initial weights are PyTorch's own init, read from the export. Each step is
// ONE graph per rank compiled by magi/compiler (magi/frontend/fx/fx_trainer.h): FSDP
// all-gathers, forward, loss, backward, reduce-scatters and AdamW on this rank's shards.
// Rank r's batch of step s is rows [r * B, (r + 1) * B) of the global batch s, drawn from a
// seeded per-epoch order of the training images.
//
// Accuracy is measured through the imported FORWARD graph (eval mode: BatchNorm uses its
// running statistics, averaged over the ranks first, since each rank keeps its own as
// FSDP/DDP without SyncBatchNorm do) with the gathered trained parameters, on the training
// images and on held-out test images (a disjoint index range of the same generator).
//
// With no RANK in the environment and --world_size > 1 it launches --world_size copies of
// itself (as torchrun would); under torchrun it is one of the workers. Rank 0 prints a
// progress line every --log_every steps and writes, each atomically, under --out_dir:
// summary.json (losses, accuracies, throughput) and final_weights.{json,bin} (every
// parameter and buffer by its PyTorch state_dict name, magi-tensors-v1:
// benchmarks/pytorch/tensor_file.py reads it into model.load_state_dict).
//
// What it does NOT do: checkpoints to resume from (FxTrainer has none yet), data augmentation, or batch shapes other than the exported ones (the batch per
// rank and the image size are the export's: edit the spec in tools/fx_models.py, or pass
// your own export with --joint / --forward).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "examples/compile_flags.h"
#include "examples/flags_usage.h"
#include "examples/shapes_dataset.h"
#include "examples/tensor_file.h"
#include "magi/comm/communicator.h"
#include "magi/backend/torch_executable.h"
#include "magi/base/file.h"
#include "magi/base/status_macros.h"
#include "magi/frontend/fx/fx_importer.h"
#include "magi/frontend/fx/fx_trainer.h"
#include "magi/runtime/deterministic/deterministic.h"
#include "magi/runtime/distributed/launcher.h"
#include "magi/runtime/distributed/rendezvous.h"

ABSL_FLAG(int, world_size, 2, "Number of processes (ranks) when launching locally");
ABSL_FLAG(int, steps, 150, "Optimizer steps (each rank takes the exported batch size per step)");
ABSL_FLAG(double, lr, 1e-3, "AdamW learning rate (the peak, with a schedule)");
ABSL_FLAG(std::string, lr_schedule, "cosine",
          "Learning-rate schedule: cosine (from --lr to --min_lr at the last step) or constant; both after "
          "--warmup_steps of linear warm-up");
ABSL_FLAG(int, warmup_steps, 0, "Learning-rate warm-up steps (linear from lr / warmup_steps to lr)");
ABSL_FLAG(double, min_lr, 0, "The learning rate --lr_schedule=cosine ends at");
ABSL_FLAG(double, weight_decay, 1e-2, "AdamW weight decay (decoupled, as torch.optim.AdamW)");
ABSL_FLAG(int, seed, 0, "Seed of the dataset and of the order in which epochs visit the training images");
ABSL_FLAG(int, train_images, 5000, "Training images (generated, classes balanced when a multiple of 10)");
ABSL_FLAG(int, test_images, 1000, "Held-out test images (the generator's next images after the training ones)");
ABSL_FLAG(double, noise, 0.05, "Standard deviation of the pixel noise, in [0, 1] (pixels span [0, 1])");
ABSL_FLAG(int, log_every, 10, "Print a progress line every N steps (and after the first and the last)");
ABSL_FLAG(int, eval_every, 0, "Also measure the test accuracy every N steps (0: only at the end)");
ABSL_FLAG(std::string, out_dir, "/tmp/magi_train_vision", "Where summary.json and final_weights.{json,bin} go");
ABSL_FLAG(std::string, summary_json, "", "Also write the summary JSON here");
ABSL_FLAG(std::string, dump_dir, "",
          "Write, for PyTorch runs on the same data (tools/train_vision_check.py): the batches of the first "
          "--dump_steps steps (batches.{json,bin}), every rank's loss and the learning rate of every step "
          "(losses.{json,bin}), and the test "
          "images, labels and the forward graph's logits (test.{json,bin}), as magi-tensors-v1 files");
ABSL_FLAG(int, dump_steps, 4, "How many steps' batches --dump_dir holds");
ABSL_FLAG(std::string, joint, "", "The joint graph to train (default: the bundled export, examples/exported/)");
ABSL_FLAG(std::string, forward, "", "The forward graph to evaluate with (default: the bundled export)");
ABSL_FLAG(std::vector<std::string>, shard_groups, std::vector<std::string>({"layer1", "layer2", "layer3", "layer4"}),
          "Module-path prefixes, each its own FSDP group (FullyShard per block); the root group takes the rest");
ABSL_FLAG(int, timeout_s, 300, "Collective timeout: a dead or hung rank fails the run after this");

namespace {

using magi::FxImport;

int Fail(int rank, absl::string_view message) {
  std::fprintf(stderr, "\n[rank %d] error: %s\n", rank, std::string(message).c_str());
  return 1;
}

std::string Duration(double seconds) {
  int s = static_cast<int>(seconds + 0.5);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

// `text` as a JSON string literal (paths from flags may hold quotes or backslashes).
std::string JsonString(absl::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Every flag's range, checked before any worker starts so a bad flag is one clear message.
absl::Status ValidateFlags() {
  auto finite = [](const char* name, double value, double lo, double hi) -> absl::Status {
    if (!std::isfinite(value) || value < lo || value > hi) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--%s=%g: must be a finite number in [%g, %g]", name, value, lo, hi));
    }
    return absl::OkStatus();
  };
  auto at_least = [](const char* name, int value, int lo) -> absl::Status {
    if (value < lo) return absl::InvalidArgumentError(absl::StrFormat("--%s=%d: must be at least %d", name, value, lo));
    return absl::OkStatus();
  };
  for (absl::Status status : {
           at_least("world_size", absl::GetFlag(FLAGS_world_size), 1),
           at_least("steps", absl::GetFlag(FLAGS_steps), 1),
           at_least("train_images", absl::GetFlag(FLAGS_train_images), 1),
           at_least("test_images", absl::GetFlag(FLAGS_test_images), 1),
           at_least("seed", absl::GetFlag(FLAGS_seed), 0),
           at_least("log_every", absl::GetFlag(FLAGS_log_every), 1),
           at_least("eval_every", absl::GetFlag(FLAGS_eval_every), 0),
           at_least("dump_steps", absl::GetFlag(FLAGS_dump_steps), 0),
           at_least("timeout_s", absl::GetFlag(FLAGS_timeout_s), 1),
           // AdamW's own range checks (torch.optim.AdamW rejects lr < 0 and weight_decay < 0).
           finite("lr", absl::GetFlag(FLAGS_lr), 0, 10),
           finite("weight_decay", absl::GetFlag(FLAGS_weight_decay), 0, 10),
           finite("noise", absl::GetFlag(FLAGS_noise), 0, 1),
       }) {
    if (!status.ok()) return status;
  }
  if (absl::GetFlag(FLAGS_lr) == 0) return absl::InvalidArgumentError("--lr=0: nothing would train");
  absl::StatusOr<magi::LrSchedule::Kind> schedule = magi::ParseLrScheduleKind(absl::GetFlag(FLAGS_lr_schedule));
  if (!schedule.ok()) return absl::InvalidArgumentError(absl::StrCat("--lr_schedule: ", schedule.status().message()));
  if (absl::Status status = at_least("warmup_steps", absl::GetFlag(FLAGS_warmup_steps), 0); !status.ok()) return status;
  if (absl::GetFlag(FLAGS_warmup_steps) >= absl::GetFlag(FLAGS_steps)) {
    return absl::InvalidArgumentError(absl::StrFormat("--warmup_steps=%d: must be fewer than --steps=%d",
                                                      absl::GetFlag(FLAGS_warmup_steps), absl::GetFlag(FLAGS_steps)));
  }
  if (absl::Status status = finite("min_lr", absl::GetFlag(FLAGS_min_lr), 0, absl::GetFlag(FLAGS_lr)); !status.ok()) {
    return status;
  }
  if (absl::GetFlag(FLAGS_world_size) > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--world_size=", absl::GetFlag(FLAGS_world_size), ": at most 64 local processes"));
  }
  for (const std::string& group : absl::GetFlag(FLAGS_shard_groups)) {
    if (group.empty()) return absl::InvalidArgumentError("--shard_groups: an empty prefix (the root takes the rest)");
  }
  return magi::ValidateCompileFlags();
}

// The bundled export `name` (examples/exported/NAME), found from `bazel run`'s runfiles tree.
std::string BundledExport(const char* argv0, const std::string& name) {
  const std::string relative = "examples/exported/" + name;
  for (const std::string& candidate : {relative, std::string(argv0) + ".runfiles/magi/" + relative}) {
    if (access(candidate.c_str(), R_OK) == 0) return candidate;
  }
  return relative;
}

// The tensor type of `graph`'s input `name`, or an error naming `file`.
absl::StatusOr<magi::TensorType> InputType(const magi::Graph& graph, const std::string& name, const std::string& file) {
  for (const magi::Value* input : graph.inputs()) {
    if (input->name() == name && input->type().is_tensor()) return input->type().tensor();
  }
  return absl::InvalidArgumentError(absl::StrCat(file, ": graph @", graph.name(), " has no tensor input %", name));
}

// What the two exports must agree on, read from their graphs.
struct ModelShape {
  int64_t batch = 0;       // images per rank per step (the joint graph's)
  int64_t eval_batch = 0;  // images per forward-graph run
  int64_t height = 0, width = 0;
  int64_t classes = 0;
};

absl::StatusOr<ModelShape> CheckExports(const FxImport& joint, const std::string& joint_path, const FxImport& forward,
                                        const std::string& forward_path) {
  if (forward.kind != "forward") {
    return absl::InvalidArgumentError(absl::StrCat(forward_path, " is a ", forward.kind,
                                                   " graph; --forward needs a forward one (fx_export.py --mode forward)"));
  }
  ModelShape shape;
  MAGI_ASSIGN_OR_RETURN(magi::TensorType images, InputType(joint.graph(), "input.0", joint_path));
  MAGI_ASSIGN_OR_RETURN(magi::TensorType labels, InputType(joint.graph(), "target.0", joint_path));
  if (images.dtype != magi::DType::kFloat32 || images.rank() != 4 || images.sizes[1] != 3) {
    return absl::InvalidArgumentError(absl::StrCat(joint_path, ": input.0 is ", images.ToString(),
                                                   "; the images must be f32[batch, 3, height, width]"));
  }
  if (labels.dtype != magi::DType::kInt64 || labels.rank() != 1 || labels.sizes[0] != images.sizes[0]) {
    return absl::InvalidArgumentError(
        absl::StrCat(joint_path, ": target.0 is ", labels.ToString(), "; the labels must be i64[", images.sizes[0], "]"));
  }
  shape.batch = images.sizes[0];
  shape.height = images.sizes[2];
  shape.width = images.sizes[3];
  MAGI_ASSIGN_OR_RETURN(magi::TensorType eval_images, InputType(forward.graph(), "input.0", forward_path));
  if (eval_images.rank() != 4 || eval_images.dtype != images.dtype || eval_images.sizes[1] != 3 ||
      eval_images.sizes[2] != shape.height || eval_images.sizes[3] != shape.width) {
    return absl::InvalidArgumentError(absl::StrCat(forward_path, ": input.0 is ", eval_images.ToString(), "; ",
                                                   joint_path, " trains on ", images.ToString()));
  }
  shape.eval_batch = eval_images.sizes[0];
  const magi::Graph& graph = forward.graph();
  if (graph.outputs().size() != 1 || !graph.outputs()[0].value->type().is_tensor() ||
      graph.outputs()[0].value->type().tensor().rank() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(forward_path, ": the forward graph must have one output, the "
                                                   "logits [batch, classes]"));
  }
  shape.classes = graph.outputs()[0].value->type().tensor().sizes[1];
  if (shape.classes != magi::kShapeClasses) {
    return absl::InvalidArgumentError(absl::StrCat(forward_path, ": the model has ", shape.classes,
                                                   " classes; the shapes dataset has ", magi::kShapeClasses));
  }
  return shape;
}

absl::StatusOr<std::vector<at::Tensor>> AllReduce(magi::Communicator& communicator, std::vector<at::Tensor> tensors,
                                                  const std::string& op) {
  MAGI_ASSIGN_OR_RETURN(auto handle, communicator.Start(magi::CollectiveKind::kAllReduce, std::move(tensors), op));
  return handle->Wait();
}

struct Dataset {
  at::Tensor images;  // [n, 3, H, W] f32
  at::Tensor labels;  // [n] i64
};

absl::StatusOr<Dataset> Generate(const magi::ShapesOptions& options, int64_t first, int64_t count) {
  MAGI_ASSIGN_OR_RETURN(magi::ShapesBatch batch, magi::GenerateShapes(options, first, count));
  Dataset out;
  out.images = at::from_blob(batch.pixels.data(), {count, 3, options.height, options.width}, at::kFloat).clone();
  out.labels = at::from_blob(batch.labels.data(), {count}, at::kLong).clone();
  return out;
}

struct Accuracy {
  int64_t correct = 0, total = 0;
  std::vector<int64_t> class_correct, class_total;
  at::Tensor logits;  // [n, classes], every rank's rows (filled only when asked for)
  double value() const { return total > 0 ? static_cast<double>(correct) / total : 0; }
};

// Runs the forward graph over `data` (rank r takes the r-th contiguous slice, in chunks of the
// exported eval batch, the last one padded with zero images whose results are dropped) and
// sums the counts over the ranks. `state` holds every parameter and buffer by input name.
absl::StatusOr<Accuracy> Evaluate(magi::TorchExecutable& executable, const magi::Graph& graph,
                                  const std::map<std::string, at::Tensor>& state, const Dataset& data,
                                  const ModelShape& shape, magi::Communicator& communicator, bool keep_logits) {
  const int64_t n = data.images.size(0), world = communicator.size(), rank = communicator.rank();
  const int64_t begin = n * rank / world, end = n * (rank + 1) / world;
  std::vector<at::Tensor> inputs;
  int image_input = -1;
  for (const magi::Value* input : graph.inputs()) {
    if (input->name() == "input.0") {
      image_input = static_cast<int>(inputs.size());
      inputs.emplace_back();
      continue;
    }
    auto it = state.find(input->name());
    if (it == state.end()) {
      return absl::InvalidArgumentError(absl::StrCat("the forward graph's input %", input->name(),
                                                     " is no parameter or buffer of the trained joint graph: the "
                                                     "two exports are of different models"));
    }
    inputs.push_back(it->second);
  }
  at::Tensor counts = at::zeros({2 * shape.classes}, at::kDouble);  // correct per class, then totals
  at::Tensor logits = keep_logits ? at::zeros({n, shape.classes}, at::kFloat) : at::Tensor();
  for (int64_t start = begin; start < end; start += shape.eval_batch) {
    const int64_t rows = std::min(shape.eval_batch, end - start);
    at::Tensor chunk = at::zeros({shape.eval_batch, 3, shape.height, shape.width}, at::kFloat);
    chunk.narrow(0, 0, rows).copy_(data.images.narrow(0, start, rows));
    inputs[image_input] = chunk;
    MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> outputs, executable.Run(inputs));
    at::Tensor out = outputs[0].narrow(0, 0, rows);
    at::Tensor predicted = out.argmax(1);
    at::Tensor labels = data.labels.narrow(0, start, rows);
    counts.narrow(0, 0, shape.classes)
        .index_add_(0, labels, (predicted == labels).to(at::kDouble));
    counts.narrow(0, shape.classes, shape.classes).index_add_(0, labels, at::ones({rows}, at::kDouble));
    if (keep_logits) logits.narrow(0, start, rows).copy_(out);
  }
  std::vector<at::Tensor> to_reduce = {counts};
  if (keep_logits) to_reduce.push_back(logits);  // zeros elsewhere: the sum is every rank's rows, exactly
  MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> reduced, AllReduce(communicator, to_reduce, "sum"));
  Accuracy accuracy;
  for (int64_t c = 0; c < shape.classes; ++c) {
    accuracy.class_correct.push_back(std::llround(reduced[0][c].item<double>()));
    accuracy.class_total.push_back(std::llround(reduced[0][shape.classes + c].item<double>()));
    accuracy.correct += accuracy.class_correct.back();
    accuracy.total += accuracy.class_total.back();
  }
  if (keep_logits) accuracy.logits = reduced[1];
  return accuracy;
}

// The trained model for the forward graph: every parameter, unsharded, and the buffers, the
// floating ones (BatchNorm running statistics) averaged over the ranks. Collective.
absl::StatusOr<std::map<std::string, at::Tensor>> EvalState(magi::FxTrainer& trainer,
                                                            magi::Communicator& communicator) {
  std::map<std::string, at::Tensor> state;
  MAGI_ASSIGN_OR_RETURN(auto params, trainer.GatherFullParameters());
  for (auto& [name, tensor] : params) state[name] = tensor;
  std::vector<std::string> names;
  std::vector<at::Tensor> floating;
  for (const auto& [name, tensor] : trainer.buffers()) {  // a std::map: the same order on every rank
    if (at::isFloatingType(tensor.scalar_type())) {
      names.push_back(name);
      floating.push_back(tensor);
    } else {
      state[name] = tensor;  // num_batches_tracked: the same on every rank
    }
  }
  if (!floating.empty()) {
    MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> averaged, AllReduce(communicator, floating, "avg"));
    for (size_t i = 0; i < names.size(); ++i) state[names[i]] = averaged[i];
  }
  return state;
}

int Train(const magi::DistributedEnv& env, const char* argv0) {
  const int rank = env.rank;
  const int world = env.world_size;
  // Ranks on one machine share its cores (torchrun sets OMP_NUM_THREADS=1 for the same reason).
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    at::set_num_threads(std::max(1, static_cast<int>(cores) / std::max(1, world)));
  }
  const bool deterministic = absl::GetFlag(FLAGS_deterministic);
  if (deterministic) {
    // Before anything runs: ATen reads these settings when its kernels are picked.
    absl::StatusOr<std::string> settings = magi::EnableDeterministicMode();
    if (!settings.ok()) return Fail(rank, settings.status().message());
    if (rank == 0) std::fprintf(stderr, "magi: deterministic mode: %s\n", settings->c_str());
  }
  const std::string out_dir = absl::GetFlag(FLAGS_out_dir);
  const std::string dump_dir = absl::GetFlag(FLAGS_dump_dir);
  if (rank == 0) {  // now, so that an unwritable folder fails before training, not after
    for (const std::string& dir : {out_dir, dump_dir}) {
      if (dir.empty()) continue;
      std::error_code error;
      std::filesystem::create_directories(dir, error);
      if (error) return Fail(rank, absl::StrCat("cannot create ", dir, ": ", error.message()));
    }
  }
  auto compile_start = std::chrono::steady_clock::now();
  const std::string joint_path =
      absl::GetFlag(FLAGS_joint).empty() ? BundledExport(argv0, "train_vision_joint.fx.json") : absl::GetFlag(FLAGS_joint);
  const std::string forward_path = absl::GetFlag(FLAGS_forward).empty()
                                       ? BundledExport(argv0, "train_vision_forward.fx.json")
                                       : absl::GetFlag(FLAGS_forward);
  absl::StatusOr<FxImport> joint = magi::ImportFxFile(joint_path);
  if (!joint.ok()) return Fail(rank, absl::StrCat("--joint=", joint_path, ": ", joint.status().message()));
  absl::StatusOr<FxImport> forward = magi::ImportFxFile(forward_path);
  if (!forward.ok()) return Fail(rank, absl::StrCat("--forward=", forward_path, ": ", forward.status().message()));
  absl::StatusOr<ModelShape> shape = CheckExports(*joint, joint_path, *forward, forward_path);
  if (!shape.ok()) return Fail(rank, shape.status().message());
  const std::string torch_version = joint->torch_version;
  int64_t parameters = 0;
  for (const magi::Value* input : joint->graph().inputs()) {
    if (input->role() == magi::InputRole::kParam) parameters += joint->tensors.at(input->name()).numel();
  }

  // The data: every rank generates the same images (a few seconds) and picks its rows.
  const int64_t n_train = absl::GetFlag(FLAGS_train_images), n_test = absl::GetFlag(FLAGS_test_images);
  const int64_t batch = shape->batch, global_batch = batch * world;
  magi::ShapesOptions data_options;
  data_options.height = shape->height;
  data_options.width = shape->width;
  data_options.noise = absl::GetFlag(FLAGS_noise);
  data_options.seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
  absl::StatusOr<Dataset> train_set = Generate(data_options, 0, n_train);
  if (!train_set.ok()) return Fail(rank, train_set.status().message());
  absl::StatusOr<Dataset> test_set = Generate(data_options, n_train, n_test);
  if (!test_set.ok()) return Fail(rank, test_set.status().message());
  std::map<int64_t, std::vector<int64_t>> orders;  // epoch -> order of the training images
  // Rows [first, first + count) of global batch `step`: consecutive positions of the epochs' orders.
  auto rows = [&](int64_t step, int64_t first, int64_t count) {
    std::vector<int64_t> picked;
    for (int64_t i = 0; i < count; ++i) {
      int64_t position = step * global_batch + first + i;
      int64_t epoch = position / n_train;
      auto it = orders.find(epoch);
      if (it == orders.end()) {
        if (orders.size() > 2) orders.erase(orders.begin());
        it = orders.emplace(epoch, magi::EpochOrder(n_train, data_options.seed, epoch)).first;
      }
      picked.push_back(it->second[position % n_train]);
    }
    at::Tensor index = at::tensor(picked, at::kLong);
    return std::vector<at::Tensor>{train_set->images.index_select(0, index), train_set->labels.index_select(0, index)};
  };

  auto store = magi::ConnectStore(env, std::chrono::seconds(absl::GetFlag(FLAGS_timeout_s)));
  if (!store.ok()) return Fail(rank, store.status().message());
  magi::CommunicatorOptions communicator_options;
  communicator_options.store = *store;
  communicator_options.rank = rank;
  communicator_options.size = world;
  communicator_options.group_name = "dp";
  communicator_options.timeout = std::chrono::seconds(absl::GetFlag(FLAGS_timeout_s));
  absl::StatusOr<std::shared_ptr<magi::Communicator>> communicator =
      magi::CreateCommunicator("gloo", communicator_options);
  if (!communicator.ok()) return Fail(rank, communicator.status().message());

  magi::FxTrainOptions options;
  options.shard_groups = absl::GetFlag(FLAGS_shard_groups);
  options.shard_groups.push_back("");  // the root: the stem and the classifier head
  options.adamw.lr = absl::GetFlag(FLAGS_lr);
  options.adamw.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  options.lr_schedule.kind = *magi::ParseLrScheduleKind(absl::GetFlag(FLAGS_lr_schedule));  // validated in main
  options.lr_schedule.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  options.lr_schedule.total_steps = absl::GetFlag(FLAGS_steps);
  options.lr_schedule.min_lr = absl::GetFlag(FLAGS_min_lr);
  options.calibration = magi::CalibrationFromFlags();
  options.compile = magi::CompileOptionsFromFlags("cpu");
  absl::StatusOr<std::unique_ptr<magi::FxTrainer>> trainer =
      magi::FxTrainer::Create(*std::move(joint), *communicator, options);
  if (!trainer.ok()) return Fail(rank, absl::StrCat(joint_path, ": ", trainer.status().message()));
  absl::StatusOr<std::unique_ptr<magi::TorchExecutable>> eval_executable =
      magi::CompileForTorch("interpreter", *forward->module, forward->graph_name);
  if (!eval_executable.ok()) return Fail(rank, absl::StrCat(forward_path, ": ", eval_executable.status().message()));
  const double compile_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - compile_start).count();
  if (rank == 0) {
    int gathers = 0, scatters = 0;
    for (const magi::Node* node : (*trainer)->graph().nodes()) {
      gathers += node->op() == magi::kAllGatherStartOp;
      scatters += node->op() == magi::kReduceScatterStartOp;
    }
    std::fprintf(stderr,
                 "magi: %s (PyTorch %s export), %.2f M parameters in %zu FSDP groups, %d ranks x %lld images of "
                 "%lldx%lld; one step graph of %d nodes (%d all-gathers, %d reduce-scatters); ready in %.1f s\n",
                 joint_path.c_str(), torch_version.c_str(), parameters / 1e6, (*trainer)->plan().groups.size(), world,
                 static_cast<long long>(batch), static_cast<long long>(shape->height),
                 static_cast<long long>(shape->width), (*trainer)->graph().num_nodes(), gathers, scatters,
                 compile_seconds);
    std::fprintf(stderr, "magi: shapes dataset (seed %d, noise %g): %lld training and %lld test images, %d classes\n",
                 absl::GetFlag(FLAGS_seed), data_options.noise, static_cast<long long>(n_train),
                 static_cast<long long>(n_test), magi::kShapeClasses);
    if (deterministic || !absl::GetFlag(FLAGS_plan_hash).empty()) {
      std::fprintf(stderr, "magi: plan hash %s%s\n", (*trainer)->plan_hash().c_str(),
                   deterministic ? absl::StrFormat(" (the same on all %d ranks)", world).c_str() : "");
    }
    // Which cached table (path, hash) the plan was chosen with.
    if (!(*trainer)->calibration_summary().empty()) {
      std::fprintf(stderr, "magi: %s\n", (*trainer)->calibration_summary().c_str());
    }
  }

  const int steps = absl::GetFlag(FLAGS_steps);
  const int dump_steps = dump_dir.empty() ? 0 : std::min(steps, absl::GetFlag(FLAGS_dump_steps));
  if (rank == 0 && dump_steps > 0) {
    std::vector<std::pair<std::string, at::Tensor>> batches;
    for (int step = 0; step < dump_steps; ++step) {
      for (int r = 0; r < world; ++r) {
        std::vector<at::Tensor> b = rows(step, r * batch, batch);
        batches.emplace_back(absl::StrCat("step", step, "/rank", r, "/input.0"), b[0]);
        batches.emplace_back(absl::StrCat("step", step, "/rank", r, "/target.0"), b[1]);
      }
    }
    absl::Status written = magi::WriteTensorFile(dump_dir + "/batches", batches);
    if (!written.ok()) return Fail(rank, written.message());
  }
  at::Tensor rank_losses = at::zeros({steps, world}, at::kDouble);
  at::Tensor step_lrs = at::zeros({steps}, at::kDouble);  // the learning rate of every step
  std::vector<double> losses;  // the mean over ranks, per step
  std::vector<std::pair<int, double>> evals;  // (step, test accuracy) of --eval_every
  double train_seconds = 0, eval_seconds = 0;
  const int log_every = absl::GetFlag(FLAGS_log_every), eval_every = absl::GetFlag(FLAGS_eval_every);
  for (int step = 0; step < steps; ++step) {
    auto step_start = std::chrono::steady_clock::now();
    const double lr = (*trainer)->next_learning_rate();
    step_lrs[step] = lr;
    absl::StatusOr<double> loss = (*trainer)->Step(rows(step, rank * batch, batch));
    if (!loss.ok()) return Fail(rank, absl::StrCat("step ", step + 1, ": ", loss.status().message()));
    at::Tensor mine = at::zeros({world}, at::kDouble);
    mine[rank] = *loss;
    absl::StatusOr<std::vector<at::Tensor>> all = AllReduce(**communicator, {mine}, "sum");
    if (!all.ok()) return Fail(rank, all.status().message());
    rank_losses[step].copy_((*all)[0]);
    losses.push_back((*all)[0].mean().item<double>());
    train_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    if (!std::isfinite(losses.back())) {
      return Fail(rank, absl::StrFormat("step %d: the loss is %g; try a smaller --lr", step + 1, losses.back()));
    }
    std::string eval_note;
    if (eval_every > 0 && (step + 1) % eval_every == 0 && step + 1 < steps) {
      auto eval_start = std::chrono::steady_clock::now();
      absl::StatusOr<std::map<std::string, at::Tensor>> state = EvalState(**trainer, **communicator);
      if (!state.ok()) return Fail(rank, state.status().message());
      absl::StatusOr<Accuracy> test = Evaluate(**eval_executable, forward->graph(), *state, *test_set, *shape,
                                               **communicator, /*keep_logits=*/false);
      if (!test.ok()) return Fail(rank, test.status().message());
      evals.emplace_back(step + 1, test->value());
      eval_note = absl::StrFormat(" | test accuracy %.1f%%", 100 * test->value());
      eval_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - eval_start).count();
    }
    if (rank == 0 && ((step + 1) % log_every == 0 || step == 0 || step + 1 == steps || !eval_note.empty())) {
      const int done = step + 1;
      std::fprintf(stderr, "step %d/%d | epoch %.2f | loss %.4f | lr %.2e | %.1f images/s | ETA %s%s\n", done,
                   steps, static_cast<double>(done) * global_batch / n_train, losses.back(), lr,
                   done * global_batch / train_seconds, Duration(train_seconds / done * (steps - done)).c_str(),
                   eval_note.c_str());
    }
  }

  // The final evaluation, through the forward graph, on both splits.
  auto eval_start = std::chrono::steady_clock::now();
  absl::StatusOr<std::map<std::string, at::Tensor>> state = EvalState(**trainer, **communicator);
  if (!state.ok()) return Fail(rank, state.status().message());
  absl::StatusOr<Accuracy> train_accuracy =
      Evaluate(**eval_executable, forward->graph(), *state, *train_set, *shape, **communicator, false);
  if (!train_accuracy.ok()) return Fail(rank, train_accuracy.status().message());
  absl::StatusOr<Accuracy> test_accuracy =
      Evaluate(**eval_executable, forward->graph(), *state, *test_set, *shape, **communicator, !dump_dir.empty());
  if (!test_accuracy.ok()) return Fail(rank, test_accuracy.status().message());
  eval_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - eval_start).count();
  if (rank != 0) return 0;

  std::vector<std::pair<std::string, at::Tensor>> weights;
  for (const magi::Value* input : forward->graph().inputs()) {  // the forward graph's order: the state_dict's
    if (input->name() != "input.0") weights.emplace_back(input->name(), state->at(input->name()));
  }
  absl::Status written = magi::WriteTensorFile(out_dir + "/final_weights", weights);
  if (!written.ok()) return Fail(rank, written.message());
  if (!dump_dir.empty()) {
    for (absl::Status status :
         {magi::WriteTensorFile(dump_dir + "/losses", {{"losses", rank_losses}, {"lrs", step_lrs}}),
          magi::WriteTensorFile(dump_dir + "/test", {{"images", test_set->images},
                                                     {"labels", test_set->labels},
                                                     {"logits", test_accuracy->logits}})}) {
      if (!status.ok()) return Fail(rank, status.message());
    }
  }
  std::vector<std::string> per_class, loss_list, eval_list;
  std::string per_class_line;
  for (int c = 0; c < magi::kShapeClasses; ++c) {
    double value = test_accuracy->class_total[c] > 0
                       ? static_cast<double>(test_accuracy->class_correct[c]) / test_accuracy->class_total[c]
                       : 0;
    per_class.push_back(absl::StrFormat("\"%s\": %.4f", magi::ShapeClassName(c), value));
    absl::StrAppendFormat(&per_class_line, "%s %s %.0f%%", c == 0 ? "" : ",", magi::ShapeClassName(c), 100 * value);
  }
  for (double loss : losses) loss_list.push_back(absl::StrFormat("%.6f", loss));
  for (const auto& [step, value] : evals) eval_list.push_back(absl::StrFormat("[%d, %.4f]", step, value));
  const double images_per_s = steps * global_batch / train_seconds;
  std::vector<std::string> group_names;
  for (const magi::FsdpGroupPlan& group : (*trainer)->plan().groups) group_names.push_back(JsonString(group.name));
  const std::string shard_groups = absl::StrJoin(group_names, ", ");
  std::string summary = absl::StrFormat(
      "{\"joint\": %s, \"forward\": %s, \"torch_version\": %s, \"parameters\": %d, \"world_size\": %d, \"steps\": %d, "
      "\"batch_per_rank\": %d, \"image_size\": [%d, %d], \"train_images\": %d, \"test_images\": %d, "
      "\"noise\": %g, \"seed\": %d, \"lr\": %g, \"lr_schedule\": %s, \"warmup_steps\": %d, \"min_lr\": %g, \"weight_decay\": %g, \"shard_groups\": [%s], \"pipeline\": %s, "
      "\"initial_loss\": %.6f, \"final_loss\": %.6f, \"train_accuracy\": %.4f, \"test_accuracy\": %.4f, "
      "\"test_accuracy_per_class\": {%s}, \"evaluated_with\": \"the forward graph, eval mode, running statistics "
      "averaged over ranks\", \"images_per_s\": %.2f, \"train_seconds\": %.3f, \"eval_seconds\": %.3f, "
      "\"compile_seconds\": %.3f, \"deterministic\": %s, \"plan_hash\": %s, \"calibration_table\": %s, "
      "\"calibration_table_hash\": %s, \"calibration_planned_hash\": %s, "
      "\"test_accuracy_during_training\": [%s], \"losses\": [%s]}\n",
      JsonString(joint_path), JsonString(forward_path), JsonString(torch_version), parameters, world, steps, batch, shape->height, shape->width, n_train, n_test,
      data_options.noise, absl::GetFlag(FLAGS_seed), options.adamw.lr,
      JsonString(absl::GetFlag(FLAGS_lr_schedule)), options.lr_schedule.warmup_steps, options.lr_schedule.min_lr,
      options.adamw.weight_decay,
      shard_groups, JsonString((*trainer)->applied_pipeline()), losses.front(), losses.back(),
      train_accuracy->value(), test_accuracy->value(), absl::StrJoin(per_class, ", "), images_per_s, train_seconds,
      eval_seconds, compile_seconds, deterministic ? "true" : "false", JsonString((*trainer)->plan_hash()),
      JsonString((*trainer)->calibration_stats().table_path), JsonString((*trainer)->calibration_stats().table_hash),
      JsonString((*trainer)->calibration_stats().planned_hash),
      absl::StrJoin(eval_list, ", "), absl::StrJoin(loss_list, ", "));
  for (const std::string& path : {out_dir + "/summary.json", absl::GetFlag(FLAGS_summary_json)}) {
    if (path.empty()) continue;
    absl::Status status = magi::WriteFileAtomically(path, summary);
    if (!status.ok()) return Fail(rank, status.message());
  }
  std::fprintf(stderr,
               "loss %.4f -> %.4f in %d steps (%.1f s, %.1f images/s)\n"
               "accuracy (forward graph, eval mode): train %.1f%% (%lld/%lld), test %.1f%% (%lld/%lld); chance is "
               "10%%\n"
               "test accuracy per class:%s\n"
               "wrote %s/{summary.json,final_weights.json,final_weights.bin}%s\n",
               losses.front(), losses.back(), steps, train_seconds, images_per_s, 100 * train_accuracy->value(),
               static_cast<long long>(train_accuracy->correct), static_cast<long long>(train_accuracy->total),
               100 * test_accuracy->value(), static_cast<long long>(test_accuracy->correct),
               static_cast<long long>(test_accuracy->total), per_class_line.c_str(), out_dir.c_str(),
               dump_dir.empty() ? "" : absl::StrCat(" and ", dump_dir, "/{batches,losses,test}.{json,bin}").c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  magi::ParseExampleFlags(
      argc, argv,
      "Trains an FX-imported torchvision classifier with FSDP on local processes, on a generated 10-class image "
      "dataset.\n  tools/bazel run //examples:train_vision -- [--world_size=2] [--steps=150] ...",
      "examples/train_vision.cc");
  absl::Status valid = ValidateFlags();
  if (!valid.ok()) {
    std::fprintf(stderr, "train_vision: %s\n", std::string(valid.message()).c_str());
    return 2;
  }
  absl::StatusOr<magi::DistributedEnv> env = magi::DistributedEnvFromEnvironment();
  if (!env.ok()) return Fail(0, env.status().message());
  if (std::optional<int> code = magi::RunLocalWorkersIfLauncher(absl::GetFlag(FLAGS_world_size), argc, argv)) {
    return *code;
  }
  return Train(*env, argv[0]);
}
