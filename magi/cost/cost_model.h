// Analytical cost of IR nodes on a device profile: FLOPs and bytes to roofline time.
//
//   seconds = op_overhead + max(flops / rate, bytes / memory_bandwidth)
//
// where rate is the profile's matmul rate for the dtype (ops whose OpTraits are
// matmul-like: mm, bmm, addmm, matmul, linear, baddbmm, attention, convolution and their
// backward ops) or its vector rate (everything else); bytes are the operands read plus
// the results written. View ops move no data. Collectives use alpha-beta formulas on the link the group spans (ring
// algorithms, as NCCL and Gloo use at these sizes):
//
//   all-gather, reduce-scatter:  (p-1) * alpha + (p-1)/p * N / bandwidth
//   all-reduce:                2 (p-1) * alpha + 2 (p-1)/p * N / bandwidth
//   all-to-all:                  (p-1) * alpha + (p-1)/p * N / bandwidth
//
// with N the bytes of the full (gathered / unreduced) buffer. A calibration table, when
// given, replaces the formula for every node it has measured.
#ifndef MAGI_COST_COST_MODEL_H_
#define MAGI_COST_COST_MODEL_H_

#include <optional>

#include "magi/analysis/node_cost.h"
#include "magi/cost/calibration.h"
#include "magi/cost/device_profile.h"
#include "magi/ir/collectives.h"
#include "magi/ir/graph.h"

namespace magi {

struct NodeCost {
  double flops = 0;
  double bytes = 0;  // memory traffic (compute) or bytes on the wire (collectives)
  double seconds = 0;
  bool calibrated = false;  // seconds came from the calibration table
};

// Implements the passes' NodeCostOracle (magi/analysis/node_cost.h) with Cost().seconds.
class CostModel : public NodeCostOracle {
 public:
  // `calibration` may be null; it is not owned and must outlive the model and its copies.
  explicit CostModel(DeviceProfile profile, const CalibrationTable* calibration = nullptr)
      : profile_(std::move(profile)), calibration_(calibration) {}

  const DeviceProfile& profile() const { return profile_; }

  // Models every collective as spanning `ranks` ranks, whatever the module's process
  // groups say (0: use the groups). For "what if this step ran on N GPUs" questions;
  // tensor shapes stay as captured.
  void set_world_size_override(int64_t ranks) { world_size_override_ = ranks; }

  // Compute cost of an op node; for a collective start, the time of the whole
  // collective; a wait costs nothing by itself (it only synchronizes).
  NodeCost Cost(const Node& node) const;
  double NodeSeconds(const Node& node) const override { return Cost(node).seconds; }

  // Bytes `node` allocates at its peak while it runs beyond its operands, its results
  // included (memory_plan.h's WorkingBytesFn; the simulator's peak counts it). For a
  // partition call (magi::call): what the compiled partition measured (the calibration
  // table's working bytes), else its callee's own memory plan with the caller holding the
  // inputs (unfused ATen buffers: errs high). 0 for everything else (results only).
  int64_t WorkingBytes(const Node& node) const;

  // Time of a collective moving a `bytes`-byte full buffer among `group_size` ranks.
  double CollectiveSeconds(CollectiveKind kind, double bytes, int64_t group_size) const;

  // FLOPs and memory traffic of an op by its shapes (0 flops for data movement).
  static NodeCost Analyze(const Node& node);

 private:
  DeviceProfile profile_;
  const CalibrationTable* calibration_;
  int64_t world_size_override_ = 0;
};

}  // namespace magi

#endif  // MAGI_COST_COST_MODEL_H_
