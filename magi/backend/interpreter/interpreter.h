// The "interpreter" backend: runs any IR graph op by op through the LibTorch dispatcher.
//
// Compile resolves every node's operator schema once and turns its constant arguments
// into IValues; Run pushes operands and constants in schema order, calls the kernel
// boxed, checks each result's dtype and shape against the IR, and frees every
// intermediate right after its last use. CPU and CUDA alike (tensors decide). If the
// graph has an rng.state input, the default generator of the graph's device is set to
// it before the first node, so random ops draw what eager mode drew from that state.
// Peak memory is the most bytes of distinct storages it held at once. Bound inputs are
// never written: an op that writes its operands (op traits: side effects) gets copies of
// those that share memory with an input.
//
// Collectives (magi::*_start / wait) run through the Communicator bound to their process
// group (BindCommunicator): a start enqueues the collective and returns; its wait blocks
// for the result, so compute between the two overlaps with communication. magi::call
// runs the callee's compiled partition (from the CompileContext); magi::adamw runs
// LibTorch's AdamW op by op (AdamWReference in magi/backend/common/step_plan.h), in place
// over donated state under RunDonating (where magi/analysis/liveness.h says so, which is
// what the memory plan counts), and so does aten::scatter.src (as aten::scatter_.src: a
// KV cache updated in place by a decode step). RunDonating also frees each input after
// its last read.
// magi::local_shard takes this rank's rows, its rank read off the communicator bound to
// the node's group.
#ifndef MAGI_BACKEND_INTERPRETER_INTERPRETER_H_
#define MAGI_BACKEND_INTERPRETER_INTERPRETER_H_

#include "magi/backend/backend.h"

namespace magi {

class InterpreterBackend : public Backend {
 public:
  absl::string_view name() const override { return "interpreter"; }
  Capability GetCapability(const Module& module, const Graph& graph) const override;
  using Backend::Compile;
  absl::StatusOr<std::unique_ptr<Executable>> Compile(const Module& module, const Graph& graph,
                                                      const CompileContext& context) const override;
};

}  // namespace magi

#endif  // MAGI_BACKEND_INTERPRETER_INTERPRETER_H_
