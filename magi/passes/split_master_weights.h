// Split master weights: every fp32 parameter input of a mixed-precision step that the step
// only casts to bf16 and updates with magi::adamw is held as two halves instead (the bf16
// cast and the low 16 bits: magi/backend/common/split_float.h), so the casts go away.
//
// Why: the 953M step's fp32 -> bf16 parameter casts are 3.1 ms of its 89.3 ms of kernels on
// an H200 at its power cap, where their time is step time (docs/benchmarks.md, the 953M step on one H200).
//
// For an input %P (role param, f32) whose uses are only
//   - aten::_to_copy(%P, dtype = bf16) with no layout, device, pinning or memory-format
//     change (the casts before each gather), and
//   - one magi::adamw with %P as its parameter, whose new parameter is read by nothing but
//     graph outputs,
// the pass adds inputs %P.hi (bf16) and %P.lo (i16) of %P's sizes, role param, replaces
// every cast's result by %P.hi, replaces the magi::adamw by magi::adamw_split (its moments'
// results keep their readers), turns each output of the new parameter into two, "<name>.hi"
// and "<name>.lo" (aliasing %P.hi and %P.lo where the output aliased %P), and removes %P.
// Inputs used any other way stay as they are. No LibTorch.
//
// Whoever feeds the step must then hold the parameter split (SplitToBf16 of the fp32
// master; JoinSplit gives it back, e.g. for checkpoints): FsdpTrainer does with
// TrainingOptions::split_master_weights, which appends this pass ("split-master-weights",
// no options) to canonicalization. The interpreter runs magi::adamw_split op by op
// (AdamWSplitReference), nccl_stream in its multi-tensor AdamW kernel. In no default
// pipeline: the step's signature changes, so only a caller that feeds it asks for it.
#ifndef MAGI_PASSES_SPLIT_MASTER_WEIGHTS_H_
#define MAGI_PASSES_SPLIT_MASTER_WEIGHTS_H_

#include "magi/passes/pass.h"

namespace magi {

class SplitMasterWeights : public GraphPass {
 public:
  static constexpr absl::string_view kName = "split-master-weights";
  absl::string_view name() const override { return kName; }

 protected:
  absl::StatusOr<bool> RunOnGraph(Graph& graph) override;
};

}  // namespace magi

#endif  // MAGI_PASSES_SPLIT_MASTER_WEIGHTS_H_
