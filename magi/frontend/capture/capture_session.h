// The recorder behind whole-step capture (internal to //magi/frontend/capture).
//
// While a CaptureSession is active (CaptureScope), every ATen op that the current
// thread, or an autograd worker running its backward, sends through the dispatcher
// reaches the boxed fallback on compat::kCaptureKey, which calls Record(). Record runs
// the op for real (below the capture key, so autograd and the kernels behave exactly as
// in eager mode) and appends a node for it:
//
//  - Ops that autograd decomposes (CompositeImplicitAutograd only) are not recorded;
//    their parts are. So the graph holds exactly the ops autograd differentiates, and
//    every tensor that autograd saves for backward is a value of the graph.
//  - Ops nested inside a recorded op's kernel are not recorded (the key is excluded).
//  - In-place and out= ops are functionalized: the node is the functional variant
//    (add_ -> add, bernoulli_.float -> bernoulli.p), the mutated tensor takes the new
//    value, and a mutated view writes back into its base with as_strided_scatter;
//    aliases of a mutated storage are re-derived with as_strided when next used.
//  - Batch norm in training writes running_mean / running_var inside its kernel, which
//    LibTorch 1.13's schemas do not declare (native_batch_norm, cudnn_batch_norm). The
//    node gets aten::clone copies of them instead, and the copies are the statistics'
//    new values from then on (as the FX importer does): graph inputs are never written.
//  - Every graph input the step writes (declared or batch norm's) is copied just before
//    its first write; RestoreWrittenInputs() puts the copies back, so the traced program
//    leaves its parameters, buffers and data as it found them.
//  - A tensor the session has not seen (a constant created before capture) becomes a
//    graph input "constant.N" and is kept in constants(); a tensor that requires grad
//    cannot be a constant and is an error.
//  - .item() and other data-dependent scalars are errors naming the op and module path.
// The first error is kept in status(); Record then throws c10::Error so the traced
// program stops, and the capture API returns the status.
#ifndef MAGI_FRONTEND_CAPTURE_CAPTURE_SESSION_H_
#define MAGI_FRONTEND_CAPTURE_CAPTURE_SESSION_H_

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "magi/ir/graph.h"

namespace magi {

class CaptureSession {
 public:
  struct Options {
    // Record this device in types and device arguments instead of the one the capture
    // ran on (capturing on meta a model that will run on cpu or cuda).
    std::optional<Device> device_override;
    // Lift unknown tensors as constant inputs; when false they are errors.
    bool allow_constants = true;
  };

  CaptureSession(Graph* graph, Options options);
  CaptureSession(const CaptureSession&) = delete;
  CaptureSession& operator=(const CaptureSession&) = delete;

  // Declares `tensor` as graph input `name` with `role`.
  absl::StatusOr<Value*> AddInput(const at::Tensor& tensor, const std::string& name, InputRole role);
  // The value `tensor` holds now; never lifts (for graph outputs). NotFound if unseen.
  absl::StatusOr<Value*> OutputValueOf(const at::Tensor& tensor);
  // True if `tensor`'s storage was written by a recorded in-place op.
  bool WasMutated(const at::Tensor& tensor);
  // Writes back into every graph input the step wrote its contents from before the
  // first write. Call after the traced program ended (no CaptureScope active).
  void RestoreWrittenInputs();

  // Runs `op` below the capture key and records it (see the file comment).
  void Record(const c10::OperatorHandle& op, c10::DispatchKeySet below, torch::jit::Stack* stack);

  absl::Status status();
  // Lifted constants in the order of their inputs ("constant.0", ...).
  const std::vector<std::pair<std::string, at::Tensor>>& constants() const { return constants_; }
  // True if a recorded op drew from a random generator.
  bool uses_rng() const { return uses_rng_; }
  int64_t recorded_ops() const { return recorded_ops_; }
  // The phase recorded on the nodes that follow (forward until the caller says otherwise).
  void set_phase(Phase phase) {
    std::lock_guard<std::mutex> lock(mutex_);
    phase_ = phase;
  }

  // The active session, if any (process-wide: autograd may run backward on its own threads).
  static CaptureSession* Current();

 private:
  friend class CaptureScope;
  struct Geometry {
    std::vector<int64_t> sizes;
    std::vector<int64_t> strides;
    int64_t offset = 0;
    c10::ScalarType dtype = c10::ScalarType::Float;
    bool operator==(const Geometry& o) const {
      return sizes == o.sizes && strides == o.strides && offset == o.offset && dtype == o.dtype;
    }
  };
  struct TensorRecord {
    Value* value = nullptr;
    int64_t version = 0;  // storage version the value reflects
    at::Tensor keep_alive;  // keeps the TensorImpl (and its address) alive during capture
  };
  struct StorageRecord {
    Value* base = nullptr;  // current value of the whole storage
    Geometry geometry;      // of `base`
    bool base_is_full = false;  // base covers the storage from offset 0, contiguously
    int64_t version = 0;
    Value* input = nullptr;  // the graph input that owns this storage, if any
    at::Tensor input_tensor;  // that input's tensor
    at::Tensor snapshot;      // its contents before the step first wrote it (set then)
    // Values known to hold a view of this storage at `version`, so that a new TensorImpl
    // over the same memory (autograd unpacks saved tensors as fresh TensorImpls) maps
    // back to its value.
    struct Alias {
      Geometry geometry;
      Value* value;
      int64_t version;
    };
    std::vector<Alias> aliases;
  };

  static Geometry GeometryOf(const at::Tensor& tensor);
  absl::Status RecordLocked(const c10::OperatorHandle& op, const std::vector<c10::IValue>& args,
                            const torch::jit::Stack& stack, size_t num_returns);
  absl::StatusOr<Value*> ValueOf(const at::Tensor& tensor, bool allow_lift);
  // Copies the graph input owning `tensor`'s storage, if any, unless already copied.
  void SnapshotInputBeforeWrite(const at::Tensor& tensor);
  void Register(const at::Tensor& tensor, Value* value);
  absl::Status UpdateAfterMutation(const at::Tensor& tensor, Value* new_value);
  // The value for a view of `storage` with `geometry` at its current version, deriving it
  // from the base with as_strided when no recorded value has that geometry.
  absl::StatusOr<Value*> ViewOfStorage(StorageRecord& storage, const at::Tensor& tensor);
  absl::StatusOr<Type> TypeOf(const at::Tensor& tensor);
  std::string ModulePathForCurrentOp();
  Node* AddRecordedNode(std::string op, std::vector<NodeArg> args, std::vector<Type> types);

  Graph* graph_;
  Options options_;
  std::mutex mutex_;
  absl::Status status_;
  absl::flat_hash_map<const c10::TensorImpl*, TensorRecord> tensors_;
  absl::flat_hash_map<const c10::StorageImpl*, StorageRecord> storages_;
  absl::flat_hash_map<int64_t, std::string> module_path_of_sequence_nr_;
  std::vector<std::pair<std::string, at::Tensor>> constants_;
  bool uses_rng_ = false;
  Phase phase_ = Phase::kForward;
  int64_t recorded_ops_ = 0;
};

// Activates `session` for this thread (and for autograd's workers) until destroyed.
class CaptureScope {
 public:
  explicit CaptureScope(CaptureSession* session);
  ~CaptureScope();
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;

 private:
  CaptureSession* previous_;
  uint64_t callback_handle_;
  c10::impl::IncludeDispatchKeyGuard include_;
};

}  // namespace magi

#endif  // MAGI_FRONTEND_CAPTURE_CAPTURE_SESSION_H_
