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
//    (add_ -> add, bernoulli_.float -> bernoulli.p) and the written tensor takes the new
//    value. Aliasing follows the shared AliasTracker (frontend/common), as in the FX
//    importer: a result that its schema calls a view and that really shares its
//    argument's memory is a view of it; a write to a view is written back into its
//    storage's root with the inverse of each view step (select_scatter, slice_scatter,
//    ..., as_strided_scatter for as_strided), and every other alias of that storage is
//    regenerated from the root when next used. What capture adds is what it sees at run
//    time: which memory tensors really share (StorageImpl identity), and each tensor's
//    geometry, so that a TensorImpl it has not seen over memory it knows (autograd
//    unpacks saved tensors as fresh TensorImpls) maps to the alias of that geometry, or
//    else to an as_strided view of the root.
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
#include "magi/frontend/common/alias_tracker.h"
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
    int alias = -1;         // in tracker_
    at::Tensor keep_alive;  // keeps the TensorImpl (and its address) alive during capture
  };
  struct StorageRecord {
    int root = -1;  // the tracker's root alias: the first tensor seen over this memory
    c10::ScalarType root_dtype = c10::ScalarType::Float;
    at::Tensor input_tensor;  // the graph input that owns this storage, if any
    at::Tensor snapshot;      // its contents before the step first wrote it (set then)
    // Every alias seen over this memory with its geometry, so that a new TensorImpl over
    // the same memory (autograd unpacks saved tensors as fresh TensorImpls) maps back to one.
    std::vector<std::pair<Geometry, int>> aliases;
  };

  static Geometry GeometryOf(const at::Tensor& tensor);
  absl::Status RecordLocked(const c10::OperatorHandle& op, const std::vector<c10::IValue>& args,
                            const torch::jit::Stack& stack, size_t num_returns);
  // The tracker's alias for `tensor`: the one registered for its TensorImpl, else one of
  // the memory it shares (MemoryAlias), else a lifted constant (when `allow_lift`).
  absl::StatusOr<int> AliasOf(const at::Tensor& tensor, bool allow_lift);
  // The current value of `tensor` (regenerated if its memory was written since).
  absl::StatusOr<Value*> ValueOf(const at::Tensor& tensor, bool allow_lift);
  // The alias for `tensor` over the memory of `storage` that no recorded view made: one
  // of the same geometry, else an as_strided view of the root (which must start its
  // storage and have `tensor`'s dtype).
  absl::StatusOr<int> MemoryAlias(StorageRecord& storage, const at::Tensor& tensor);
  // `tensor`, holding `value` (a graph input or the result of an op that is no view),
  // gets its alias: the root of a new storage, or, when its memory is one already seen
  // (two inputs over one storage, an op returning memory its schema does not call a
  // view), that memory's MemoryAlias (then `value` goes unused), or where there is none a
  // root whose aliasing is uncertain, so that a write to either is refused.
  absl::Status RegisterRoot(const at::Tensor& tensor, Value* value);
  // Maps `tensor`'s TensorImpl (and its geometry over its storage) to `alias`.
  void RegisterAlias(const at::Tensor& tensor, int alias);
  // Copies the graph input owning `tensor`'s storage, if any, unless already copied.
  void SnapshotInputBeforeWrite(const at::Tensor& tensor);
  absl::StatusOr<Type> TypeOf(const at::Tensor& tensor);
  std::string ModulePathForCurrentOp();
  Node* AddRecordedNode(std::string op, std::vector<NodeArg> args, std::vector<Type> types);

  Graph* graph_;
  Options options_;
  AliasTracker tracker_;
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
