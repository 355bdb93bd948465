#include "magi/cost/cost_model.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "magi/analysis/memory_plan.h"

namespace magi {
namespace {

// "aten::addmm.out" -> "addmm".
absl::string_view BaseName(absl::string_view op) {
  size_t colons = op.rfind("::");
  if (colons != absl::string_view::npos) op = op.substr(colons + 2);
  size_t dot = op.find('.');
  return dot == absl::string_view::npos ? op : op.substr(0, dot);
}

double Elements(const Value* value) {
  std::optional<int64_t> n = value->type().tensor().NumElements();
  return n ? static_cast<double>(*n) : 0.0;
}

double Bytes(const Value* value) {
  std::optional<int64_t> n = value->type().tensor().SizeInBytes();
  return n ? static_cast<double>(*n) : 0.0;
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
// contraction read off the first matrix operand; backward ops produce two gradients
// (each a matmul of the same size as the forward), attention does QK^T and PV.
double MatmulFlops(const Node& node) {
  absl::string_view base = BaseName(node.op());
  if (node.num_results() == 0) return 0;
  if (absl::StrContains(base, "attention") || absl::StrContains(base, "flash") ||
      absl::StrContains(base, "efficient")) {
    if (node.num_operands() < 2) return 0;
    const TensorType& q = node.operand(0)->type().tensor();
    const TensorType& k = node.operand(1)->type().tensor();
    if (q.rank() < 2 || k.rank() < 2) return 0;
    double batch = 1;
    for (int64_t i = 0; i + 2 < q.rank(); ++i) batch *= static_cast<double>(q.sizes[i]);
    double s = static_cast<double>(q.sizes[q.rank() - 2]), d = static_cast<double>(q.sizes.back());
    double t = static_cast<double>(k.sizes[k.rank() - 2]);
    double forward = 4 * batch * s * t * d;
    return absl::StrContains(base, "backward") ? 2.5 * forward : forward;
  }
  if (absl::StrContains(base, "convolution") || base == "conv2d" || base == "conv1d" || base == "_convolution") {
    if (node.num_operands() < 2) return 0;
    const TensorType& weight = node.operand(1)->type().tensor();
    double per_output = 1;  // Cin/groups * kernel elements
    for (int64_t i = 1; i < weight.rank(); ++i) per_output *= static_cast<double>(weight.sizes[i]);
    if (absl::StrContains(base, "backward")) {
      // grad_output is operand 0: input and weight gradients, each as large as forward.
      return 2 * 2 * Elements(node.operand(0)) * per_output;
    }
    return 2 * Elements(node.result(0)) * per_output;
  }
  // addmm(bias, mat1, mat2) and friends contract mat1's last dim.
  bool has_bias = base == "addmm" || base == "baddbmm" || base == "addbmm";
  const Value* matrix = has_bias ? (node.num_operands() > 1 ? node.operand(1) : nullptr) : FirstMatrix(node);
  if (matrix == nullptr) return 0;
  double contraction = static_cast<double>(matrix->type().tensor().sizes.back());
  double flops = 2 * Elements(node.result(0)) * contraction;
  if (absl::StrContains(base, "backward")) flops *= 2;
  return flops;
}

}  // namespace

bool IsMatmulLike(absl::string_view op) {
  absl::string_view base = BaseName(op);
  for (absl::string_view name :
       {"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "conv1d", "conv2d", "conv3d", "convolution",
        "_convolution", "convolution_backward", "linear_backward", "matmul_backward"}) {
    if (base == name) return true;
  }
  return absl::StrContains(base, "scaled_dot_product") || absl::StrContains(base, "flash_attention") ||
         absl::StrContains(base, "efficient_attention");
}

NodeCost CostModel::Analyze(const Node& node) {
  NodeCost cost;
  if (IsCommunication(node.op())) {
    for (const Value* operand : node.operands()) {
      if (operand->type().is_tensor()) cost.bytes += Bytes(operand);
    }
    return cost;
  }
  if (IsViewOp(node.op())) return cost;
  for (const Value* operand : node.operands()) cost.bytes += Bytes(operand);
  double result_elements = 0;
  for (const Value* result : node.results()) {
    cost.bytes += Bytes(result);
    result_elements += Elements(result);
  }
  if (IsMatmulLike(node.op())) {
    cost.flops = MatmulFlops(node);
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
  if (IsViewOp(node.op())) {
    cost.seconds = profile_.op_overhead_s * 0.25;  // metadata only
    return cost;
  }
  DType dtype = node.num_results() > 0 ? node.result(0)->type().tensor().dtype : DType::kFloat32;
  double rate = IsMatmulLike(node.op()) ? profile_.MatmulFlops(dtype) : profile_.vector_flops;
  cost.seconds = profile_.op_overhead_s + std::max(cost.flops / rate, cost.bytes / profile_.memory_bandwidth);
  return cost;
}

}  // namespace magi
