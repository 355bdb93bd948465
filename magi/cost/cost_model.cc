#include "magi/cost/cost_model.h"

#include <algorithm>

#include "magi/analysis/memory_plan.h"
#include "magi/analysis/op_traits.h"
#include "magi/ir/magi_ops.h"

namespace magi {
namespace {

// Counts in double: costs cannot fail, and a product of sizes need not fit in int64
// (exact below 2^53 elements; 0 for dynamic sizes).
double Elements(const Value* value) {
  const TensorType& type = value->type().tensor();
  if (type.HasDynamicDims()) return 0.0;
  double n = 1;
  for (int64_t size : type.sizes) n *= static_cast<double>(size);
  return n;
}

double Bytes(const Value* value) {
  return Elements(value) * static_cast<double>(DTypeSize(value->type().tensor().dtype));
}

int64_t GroupSize(const Node& node) {
  const Attribute* group = node.FindArg("group");
  const Module* module = node.graph() != nullptr ? node.graph()->module() : nullptr;
  if (group == nullptr || group->kind() != AttrKind::kString || module == nullptr) return 1;
  const ProcessGroup* pg = module->FindProcessGroup(group->as_string());
  return pg == nullptr ? 1 : pg->size;
}

// The first operand of rank >= 2 (the matrix a matmul-like op contracts), or null.
const Value* FirstMatrix(const Node& node) {
  for (const Value* operand : node.operands()) {
    if (operand->type().tensor().rank() >= 2) return operand;
  }
  return nullptr;
}

// FLOPs of matrix-unit ops: 2 * (output elements) * (contraction length), with the
// contraction read off the matrix operand; backward ops produce two gradients (each a
// matmul of the same size as the forward), attention does QK^T and PV.
double MatmulFlops(const Node& node, const OpTraits& traits) {
  if (node.num_results() == 0) return 0;
  switch (traits.matmul) {
    case MatmulKind::kNone:
      return 0;
    case MatmulKind::kAttention: {
      if (node.num_operands() < 2) return 0;
      const TensorType& q = node.operand(0)->type().tensor();
      const TensorType& k = node.operand(1)->type().tensor();
      if (q.rank() < 2 || k.rank() < 2) return 0;
      double batch = 1;
      for (int64_t i = 0; i + 2 < q.rank(); ++i) batch *= static_cast<double>(q.sizes[i]);
      double s = static_cast<double>(q.sizes[q.rank() - 2]), d = static_cast<double>(q.sizes.back());
      double t = static_cast<double>(k.sizes[k.rank() - 2]);
      double forward = 4 * batch * s * t * d;
      return traits.backward ? 2.5 * forward : forward;
    }
    case MatmulKind::kConvolution: {
      if (node.num_operands() < 2) return 0;
      const TensorType& weight = node.operand(1)->type().tensor();
      double per_output = 1;  // Cin/groups * kernel elements
      for (int64_t i = 1; i < weight.rank(); ++i) per_output *= static_cast<double>(weight.sizes[i]);
      if (traits.backward) {
        // grad_output is operand 0: input and weight gradients, each as large as forward.
        return 2 * 2 * Elements(node.operand(0)) * per_output;
      }
      return 2 * Elements(node.result(0)) * per_output;
    }
    case MatmulKind::kMatmul: {
      // addmm(bias, mat1, mat2) and friends name their matrix operand.
      const Value* matrix = traits.matrix_operand < 0 ? FirstMatrix(node)
                            : traits.matrix_operand < node.num_operands() ? node.operand(traits.matrix_operand)
                                                                          : nullptr;
      if (matrix == nullptr || matrix->type().tensor().rank() == 0) return 0;
      double contraction = static_cast<double>(matrix->type().tensor().sizes.back());
      double flops = 2 * Elements(node.result(0)) * contraction;
      return traits.backward ? 2 * flops : flops;
    }
  }
  return 0;
}

}  // namespace

NodeCost CostModel::Analyze(const Node& node) {
  NodeCost cost;
  if (IsCommunication(node.op())) {
    for (const Value* operand : node.operands()) {
      if (operand->type().is_tensor()) cost.bytes += Bytes(operand);
    }
    return cost;
  }
  OpTraits traits = GetOpTraits(node.op());
  if (traits.view) return cost;
  for (const Value* operand : node.operands()) cost.bytes += Bytes(operand);
  double result_elements = 0;
  for (const Value* result : node.results()) {
    cost.bytes += Bytes(result);
    result_elements += Elements(result);
  }
  if (traits.matmul_like()) {
    cost.flops = MatmulFlops(node, traits);
  } else {
    // Elementwise and reductions: about one operation per element touched.
    double operand_elements = 0;
    for (const Value* operand : node.operands()) operand_elements += Elements(operand);
    cost.flops = std::max(result_elements, operand_elements);
  }
  return cost;
}

double CostModel::CollectiveSeconds(CollectiveKind kind, double bytes, int64_t group_size) const {
  if (group_size <= 1) return profile_.op_overhead_s;
  const LinkProfile& link = profile_.LinkFor(group_size);
  double p = static_cast<double>(group_size);
  double steps = p - 1;
  double volume = (p - 1) / p * bytes;
  if (kind == CollectiveKind::kAllReduce) {
    steps *= 2;
    volume *= 2;
  }
  return profile_.op_overhead_s + steps * link.latency_s + volume / link.bandwidth;
}

int64_t CostModel::WorkingBytes(const Node& node) const {
  if (node.op() != kCallOp) return 0;
  if (calibration_ != nullptr) {
    if (std::optional<int64_t> measured = calibration_->FindWorkingBytes(CalibrationTable::KeyOf(node))) return *measured;
  }
  // Calls within calls nest a few deep at most; a cycle of calls (which the verifier does
  // not rule out) stops here.
  constexpr int kMaxCallDepth = 8;
  thread_local int depth = 0;
  const Module* module = node.graph() != nullptr ? node.graph()->module() : nullptr;
  const Graph* callee = module != nullptr ? module->FindGraph(CalleeName(node)) : nullptr;
  if (callee == nullptr || callee == node.graph() || depth >= kMaxCallDepth) return 0;
  LivenessOptions held;
  held.inputs_held_by_caller = true;  // the call's operands stay the caller's
  ++depth;
  absl::StatusOr<MemoryPlan> plan = PlanMemory(*callee, /*assign_buffers=*/false, held, [this](const Node& inner) {
    return WorkingBytes(inner);
  });
  --depth;
  return plan.ok() ? plan->peak_bytes - plan->start_bytes : 0;
}

NodeCost CostModel::Cost(const Node& node) const {
  NodeCost cost = Analyze(node);
  if (node.op() == kWaitOp) return cost;
  if (calibration_ != nullptr) {
    if (std::optional<double> measured = calibration_->Lookup(node)) {
      cost.seconds = *measured;
      cost.calibrated = true;
      return cost;
    }
  }
  if (node.op() == kCallOp) {
    // An unmeasured partition: what its nodes would cost one by one (a fused partition
    // is faster; calibration by default measures compiled partitions, AutoCalibration).
    const Module* module = node.graph() != nullptr ? node.graph()->module() : nullptr;
    const Graph* callee = module != nullptr ? module->FindGraph(CalleeName(node)) : nullptr;
    if (callee != nullptr && callee != node.graph()) {
      NodeCost sum;
      for (const Node* inner : callee->nodes()) {
        NodeCost part = Cost(*inner);
        sum.flops += part.flops;
        sum.bytes += part.bytes;
        sum.seconds += part.seconds;
      }
      return sum;
    }
  }
  if (std::optional<CollectiveKind> kind = GetCollectiveKind(node.op())) {
    // The full buffer: gathered results for an all-gather, the inputs otherwise.
    double full = 0;
    int64_t p = world_size_override_ > 0 ? world_size_override_ : GroupSize(node);
    for (const Value* result : node.results()) full += Bytes(result);
    if (*kind == CollectiveKind::kReduceScatter) full *= static_cast<double>(p);
    cost.bytes = full;
    cost.seconds = CollectiveSeconds(*kind, full, p);
    return cost;
  }
  OpTraits traits = GetOpTraits(node.op());
  if (traits.view) {
    cost.seconds = profile_.op_overhead_s * 0.25;  // metadata only
    return cost;
  }
  DType dtype = node.num_results() > 0 ? node.result(0)->type().tensor().dtype : DType::kFloat32;
  double rate = traits.matmul_like() ? profile_.MatmulFlops(dtype) : profile_.vector_flops;
  cost.seconds = profile_.op_overhead_s + std::max(cost.flops / rate, cost.bytes / profile_.memory_bandwidth);
  return cost;
}

}  // namespace magi
