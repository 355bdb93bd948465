// The run plan of a graph for executors that run LibTorch tensors through the
// dispatcher (the interpreter, the nccl_stream runtime).
//
// BuildStepPlan resolves once what running a graph needs: for every node its kind
// (ATen op, collective start, wait, magi::call, magi::adamw (either form), magi::local_shard), for ATen ops the operator
// handle and the schema-ordered arguments (operands as value slots, constants as
// IValues, trailing defaults from the schema), the slots of its results with their IR
// types, and the slots whose last use it is (so executors free intermediates early).
// Executors keep one at::Tensor per slot.
//
//   absl::StatusOr<StepPlan> plan = BuildStepPlan(graph);
//   for (const NodePlan& node : plan->nodes) { ... PushArguments(node, slots, stack); op->callBoxed(&stack); ... }
#ifndef MAGI_BACKEND_COMMON_STEP_PLAN_H_
#define MAGI_BACKEND_COMMON_STEP_PLAN_H_

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "magi/backend/common/index_checks.h"
#include "magi/ir/collectives.h"
#include "magi/ir/graph.h"
#include "magi/ir/magi_ops.h"

namespace magi {

// How to produce one schema argument at run time.
struct ArgPlan {
  enum class Source { kConstant, kOperand, kOperandList, kOptionalOperandList } source = Source::kConstant;
  c10::IValue constant;
  std::vector<int> slots;  // value slots; -1 for a none entry
};

struct NodePlan {
  enum class Kind { kOp, kCollectiveStart, kWait, kCall, kAdamW, kLocalShard } kind = Kind::kOp;
  const Node* node = nullptr;
  c10::optional<c10::OperatorHandle> op;  // kOp only
  // kOp: validates index arguments the op's CPU kernel does not check (index_checks.h);
  // null for most ops.
  IndexCheck index_check = nullptr;
  // kCollectiveStart (and kLocalShard: `group` only):
  CollectiveKind collective = CollectiveKind::kAllGather;
  std::string group;
  std::string reduce_op;
  int start_plan = -1;  // kWait: the plan index of its start
  std::string callee;   // kCall: the callee graph
  AdamWConstants adamw;  // kAdamW
  // kAdamW: a magi::adamw_split (operands and results in its order: magi_ops.h).
  bool adamw_split = false;
  // kAdamW: whether each result (p', m', v'; split: hi', lo', m', v') is written over its
  // input when the inputs are donated (magi/analysis/liveness.h decides, so runtime and
  // memory plan agree).
  bool adamw_in_place[4] = {false, false, false, false};
  // kOp whose result liveness.h plans over a donated operand (InPlaceOperandOfResult,
  // aten::scatter.src): the in-place variant (aten::scatter_.src, the same arguments) an
  // executor runs instead when its inputs are donated. Unset otherwise.
  c10::optional<c10::OperatorHandle> in_place_op;
  // kOp whose results are memory nobody wrote (OpTraits::uninitialized: aten::empty and
  // its kin): CallOperator fills them while deterministic algorithms are on
  // (compat::FillUninitialized), as LibTorch would if Magi had not turned its global
  // fill off (magi/compat/deterministic.h says why).
  bool uninitialized = false;
  // kOp aten::scatter.src / aten::scatter_.src: when its index has ONE entry along `dim`
  // (a KV cache's one-position update), every target element is written at most once, so
  // the plain kernel is deterministic; CallOperator then runs it with ATen's deterministic
  // check suspended (compat::DeterministicAlgorithmsSuspended says why).
  bool scatter_src = false;
  // kOp: schema arguments; starts, calls, adamw and local_shard: one kOperandList with every operand.
  std::vector<ArgPlan> args;
  std::vector<int> result_slots;
  std::vector<TensorType> result_types;
  std::vector<int> release_slots;  // slots whose last use is this node
  explicit NodePlan(const Node* n) : node(n) {}
};

struct StepPlan {
  std::vector<NodePlan> nodes;  // program order
  std::vector<int> input_slots;
  std::vector<int> output_slots;
  int rng_slot = -1;  // the rng.state input's slot, if any
  int num_slots = 0;
  std::vector<std::string> groups;  // process groups the collectives and local_shard nodes use
  std::vector<std::string> callees;  // graphs the magi::call nodes call
  absl::flat_hash_map<const Value*, int> slot_of;  // every value's slot
};

absl::StatusOr<StepPlan> BuildStepPlan(const Graph& graph);

// "graph @g: aten::mm (%3 = ...)" for errors.
std::string Where(const Node& node);

// The operator a node names; NotFound naming the node when LibTorch has none.
absl::StatusOr<c10::OperatorHandle> FindOperator(const Node& node);

// Why an executor built on StepPlan cannot run `node` ("" if it can): magi:: ops other than
// collectives, waits, calls and adamw, and ATen ops LibTorch does not have.
std::string WhyNotRunnable(const Node& node);

// Pushes `plan`'s arguments (kOp) onto `stack`, reading operands from `slots`.
void PushArguments(const NodePlan& plan, const std::vector<at::Tensor>& slots, torch::jit::Stack& stack);

// Runs `plan`'s operator (kOp) on its arguments read from `slots`, using `stack` as
// scratch; returns the result tensors, or Internal naming the node on a LibTorch error.
// `before_call`, when given, may replace arguments on the stack first (the interpreter
// hands an op that writes its operands copies of the caller's input tensors). With
// `in_place` (the caller's inputs are donated) a node that has an in_place_op runs it,
// writing its result over the donated operand. Index arguments the op's CPU kernel would
// use unchecked are validated before the call (InvalidArgument naming the node, the
// argument and the offending value). An undefined tensor the kernel returns where the IR
// has a result with no element becomes an empty tensor of that type (nn.LSTM's
// aten::mkldnn_rnn_layer workspace outside training).
absl::StatusOr<std::vector<at::Tensor>> CallOperator(const NodePlan& plan, const std::vector<at::Tensor>& slots,
                                                     torch::jit::Stack& stack,
                                                     const std::function<void(torch::jit::Stack&)>& before_call = {},
                                                     bool in_place = false);

// The defined tensors among a kernel's returns, in order (as capture records them).
std::vector<at::Tensor> ResultTensors(torch::jit::Stack& stack);

// Checks `tensors` against the plan's result types (dtype and shape; and strides when the
// environment sets MAGI_CHECK_STRIDES=1 and `allow_stride_check`: a kernel calibrator's
// runs on synthesized inputs leave it out); Internal naming the node and both types on a
// mismatch.
absl::Status CheckResults(const NodePlan& plan, const std::vector<at::Tensor>& tensors,
                          bool allow_stride_check = true);

// Sets the default generator of the graph's device (CUDA if any result is on CUDA, else
// the CPU's) to `state`, so random ops draw what eager mode drew from that state.
absl::Status SetGeneratorState(const StepPlan& plan, const at::Tensor& state);

// magi::local_shard: rank `rank`'s rows of `whole` among `size` ranks, as a fresh
// contiguous tensor (dim 0 divisible by `size`: the verifier checks it).
at::Tensor LocalShardOf(const at::Tensor& whole, int rank, int size);

// LibTorch's AdamW update of one shard, op by op (the reference semantics of
// magi::adamw; bitwise what LibTorch's own AdamW computes from the same scalars).
// Returns {param', exp_avg', exp_avg_sq'}; with `in_place[i]` the i-th is written over
// its input (param, exp_avg, exp_avg_sq) with the same ops in place, bitwise the same.
std::vector<at::Tensor> AdamWReference(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& exp_avg,
                                       const at::Tensor& exp_avg_sq, const at::Tensor& decay,
                                       const at::Tensor& step_size, const at::Tensor& bc2_sqrt,
                                       const AdamWConstants& constants, const bool in_place[3] = nullptr);

// magi::adamw_split: AdamWReference of the joined parameter (split_tensor.h), split again.
// Returns {hi', lo', exp_avg', exp_avg_sq'}; with `in_place[i]` the i-th is written over
// its input (hi, lo, exp_avg, exp_avg_sq).
std::vector<at::Tensor> AdamWSplitReference(const at::Tensor& hi, const at::Tensor& lo, const at::Tensor& grad,
                                            const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq,
                                            const at::Tensor& decay, const at::Tensor& step_size,
                                            const at::Tensor& bc2_sqrt, const AdamWConstants& constants,
                                            const bool in_place[4] = nullptr);

// AdamWReference or AdamWSplitReference of an AdamW node's operands (operand order of
// its op), by `split`; `in_place` has one entry per result (3, or 4 split).
std::vector<at::Tensor> AdamWReferenceOf(bool split, const std::vector<at::Tensor>& operands,
                                         const AdamWConstants& constants, const bool* in_place);

}  // namespace magi

#endif  // MAGI_BACKEND_COMMON_STEP_PLAN_H_
