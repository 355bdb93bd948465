#include "magi/backend/elementwise/elementwise.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "magi/backend/torch_executable.h"
#include "magi/base/status_macros.h"
#include "magi/compat/torch_compat.h"
#include "magi/registry/registry.h"

namespace magi {
namespace {

constexpr int64_t kBlock = 2048;  // elements per block: every temporary of a block stays in L1/L2

enum class OpCode { kAdd, kSub, kMul, kDiv, kNeg, kRelu };

struct OpInfo {
  OpCode code;
  bool scalar_overload;  // the second operand is a constant argument
  bool has_alpha;
};

const OpInfo* FindOp(absl::string_view op) {
  static const auto* ops = new absl::flat_hash_map<std::string, OpInfo>{
      {"aten::add.Tensor", {OpCode::kAdd, false, true}}, {"aten::sub.Tensor", {OpCode::kSub, false, true}},
      {"aten::mul.Tensor", {OpCode::kMul, false, false}}, {"aten::div.Tensor", {OpCode::kDiv, false, false}},
      {"aten::add.Scalar", {OpCode::kAdd, true, true}},  {"aten::sub.Scalar", {OpCode::kSub, true, true}},
      {"aten::mul.Scalar", {OpCode::kMul, true, false}}, {"aten::div.Scalar", {OpCode::kDiv, true, false}},
      {"aten::neg", {OpCode::kNeg, false, false}},        {"aten::relu", {OpCode::kRelu, false, false}},
  };
  auto it = ops->find(std::string(op));
  return it == ops->end() ? nullptr : &it->second;
}

bool IsFloat32Cpu(const TensorType& type) {
  return type.dtype == DType::kFloat32 && type.device.type == DeviceType::kCpu && type.strides.empty();
}

std::optional<double> NumberArg(const Node& node, int index) {
  if (index >= static_cast<int>(node.args().size())) return std::nullopt;
  const Attribute& value = node.args()[index].value;
  if (value.kind() == AttrKind::kFloat) return value.as_float();
  if (value.kind() == AttrKind::kInt) return static_cast<double>(value.as_int());
  if (value.kind() == AttrKind::kBool) return value.as_bool() ? 1.0 : 0.0;
  return std::nullopt;
}

// Why `node` cannot run here, or "" if it can.
std::string Decline(const Node& node) {
  const OpInfo* info = FindOp(node.op());
  if (info == nullptr) return "not elementwise arithmetic";
  if (node.num_results() != 1) return "not one result";
  const TensorType& out = node.result(0)->type().tensor();
  if (!IsFloat32Cpu(out)) return "result is not a contiguous float32 CPU tensor";
  for (const Value* operand : node.operands()) {
    const TensorType& type = operand->type().tensor();
    if (!IsFloat32Cpu(type)) return "operand is not a contiguous float32 CPU tensor";
    if (!type.sizes.empty() && type.sizes != out.sizes) return "broadcasts (only 0-dim operands may)";
  }
  if (node.num_operands() > 0 && node.operand(0)->type().tensor().sizes.empty() && !out.sizes.empty()) {
    return "first operand broadcasts";
  }
  int expected_operands = info->code == OpCode::kNeg || info->code == OpCode::kRelu || info->scalar_overload ? 1 : 2;
  if (node.num_operands() != expected_operands) return "unexpected operands";
  if (info->scalar_overload && !NumberArg(node, 1)) return "scalar argument is not a number";
  if (info->code == OpCode::kDiv && (info->scalar_overload || node.operand(1)->type().tensor().sizes.empty())) {
    return "division by a scalar (ATen may multiply by the reciprocal)";
  }
  if (info->has_alpha && node.args().size() > 2u && !NumberArg(node, 2)) {
    return "alpha is not a number";
  }
  if (node.op() == "aten::div.Tensor" && node.args().size() > 2) return "rounding modes are not supported";
  return "";
}

// A value the program reads: a register (an input or a result) or a constant.
struct Source {
  int reg = -1;
  float constant = 0;
};

struct Instruction {
  OpCode code;
  int dst;
  Source a, b;
  float alpha = 1;
  bool use_fma = false;  // alpha != 1: a + alpha * b with one rounding, as ATen's vectorized kernels
};

struct Register {
  int64_t numel = 0;
  bool scalar = false;         // 0-dim
  bool materialized = false;   // a full tensor (input, output, or read by a later segment)
  std::vector<int64_t> sizes;  // of materialized results
};

struct Segment {
  int64_t numel = 0;
  std::vector<Instruction> code;
  std::vector<int> temps;  // registers that live only in block buffers
};

class ElementwiseExecutable : public TorchExecutable {
 public:
  absl::string_view backend_name() const override { return "elementwise"; }
  const RunStats& last_run_stats() const override { return stats_; }
  void set_profile_nodes(bool) override {}
  absl::Status BindCommunicator(const std::string& group, std::shared_ptr<Communicator>) override {
    return absl::FailedPreconditionError(absl::StrCat("the elementwise backend runs no collectives (group ", group, ")"));
  }

  static absl::StatusOr<std::unique_ptr<ElementwiseExecutable>> Build(const Graph& graph) {
    auto exe = std::unique_ptr<ElementwiseExecutable>(new ElementwiseExecutable());
    absl::flat_hash_map<const Value*, int> reg_of;
    auto add_register = [&](const Value* value) {
      const TensorType& type = value->type().tensor();
      Register reg;
      reg.scalar = type.sizes.empty();
      reg.numel = 1;
      for (int64_t size : type.sizes) reg.numel *= size;
      reg.sizes = type.sizes;
      reg_of[value] = static_cast<int>(exe->registers_.size());
      exe->registers_.push_back(reg);
      return reg_of[value];
    };
    for (const Value* input : graph.inputs()) {
      int reg = add_register(input);
      exe->registers_[reg].materialized = true;
      exe->input_registers_.push_back(reg);
    }
    std::vector<int> segment_of_register;
    for (const Node* node : graph.nodes()) {
      std::string reason = Decline(*node);
      if (!reason.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("graph @", graph.name(), ": ", node->DebugName(), ": ", reason));
      }
      const OpInfo& info = *FindOp(node->op());
      Instruction instruction;
      instruction.code = info.code;
      instruction.a.reg = reg_of.at(node->operand(0));
      if (info.scalar_overload) {
        instruction.b.constant = static_cast<float>(*NumberArg(*node, 1));
      } else if (node->num_operands() > 1) {
        instruction.b.reg = reg_of.at(node->operand(1));
      }
      if (info.has_alpha) {
        double alpha = NumberArg(*node, 2).value_or(1.0);
        if (info.code == OpCode::kSub) alpha = -alpha;  // ATen's sub is add with -alpha
        instruction.code = OpCode::kAdd;
        instruction.alpha = static_cast<float>(alpha);
        instruction.use_fma = alpha != 1.0;
        if (info.code == OpCode::kSub && alpha == -1.0) {
          instruction.code = OpCode::kSub;
          instruction.use_fma = false;
        }
      }
      instruction.dst = add_register(node->result(0));
      const Register& dst = exe->registers_[instruction.dst];
      if (exe->segments_.empty() || exe->segments_.back().numel != dst.numel) {
        exe->segments_.push_back(Segment{dst.numel, {}, {}});
      }
      exe->segments_.back().code.push_back(instruction);
      segment_of_register.resize(exe->registers_.size(), -1);
      segment_of_register[instruction.dst] = static_cast<int>(exe->segments_.size()) - 1;
    }
    segment_of_register.resize(exe->registers_.size(), -1);
    // Results read by a later segment, and outputs, are full tensors; the rest are temporaries.
    for (size_t s = 0; s < exe->segments_.size(); ++s) {
      for (const Instruction& instruction : exe->segments_[s].code) {
        for (const Source& source : {instruction.a, instruction.b}) {
          if (source.reg >= 0 && segment_of_register[source.reg] >= 0 &&
              segment_of_register[source.reg] != static_cast<int>(s)) {
            exe->registers_[source.reg].materialized = true;
          }
        }
      }
    }
    for (const GraphOutput& output : graph.outputs()) {
      auto it = reg_of.find(output.value);
      if (it == reg_of.end()) return absl::InvalidArgumentError("an output is not a value of the partition");
      exe->registers_[it->second].materialized = true;
      exe->output_registers_.push_back(it->second);
    }
    for (Segment& segment : exe->segments_) {
      for (const Instruction& instruction : segment.code) {
        if (!exe->registers_[instruction.dst].materialized) segment.temps.push_back(instruction.dst);
      }
    }
    return exe;
  }

  absl::StatusOr<std::vector<at::Tensor>> Run(const std::vector<at::Tensor>& inputs) override {
    if (inputs.size() != input_registers_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the partition takes ", input_registers_.size(), " inputs, ", inputs.size(), " given"));
    }
    std::vector<at::Tensor> tensors(registers_.size());
    std::vector<float> scalars(registers_.size(), 0.f);
    for (size_t i = 0; i < inputs.size(); ++i) {
      int reg = input_registers_[i];
      const at::Tensor& input = inputs[i];
      if (input.scalar_type() != at::kFloat || !input.device().is_cpu() || input.numel() != registers_[reg].numel ||
          (!registers_[reg].scalar && !input.is_contiguous())) {
        return absl::InvalidArgumentError(absl::StrCat("input ", i, " is not a contiguous float32 CPU tensor of ",
                                                       registers_[reg].numel, " elements"));
      }
      if (registers_[reg].scalar) {
        scalars[reg] = input.item<float>();
      } else {
        tensors[reg] = input;
      }
    }
    int64_t peak = 0;
    for (const Segment& segment : segments_) {
      for (const Instruction& instruction : segment.code) {
        const Register& dst = registers_[instruction.dst];
        if (dst.materialized) {
          tensors[instruction.dst] = at::empty(dst.sizes, at::TensorOptions().dtype(at::kFloat));
          peak += dst.numel * 4;
        }
      }
      RunSegment(segment, tensors, scalars);
    }
    std::vector<at::Tensor> outputs;
    for (int reg : output_registers_) {
      outputs.push_back(registers_[reg].scalar && !tensors[reg].defined() ? at::scalar_tensor(scalars[reg])
                                                                          : tensors[reg]);
    }
    stats_ = RunStats();
    stats_.nodes_run = 0;
    for (const Segment& segment : segments_) stats_.nodes_run += static_cast<int64_t>(segment.code.size());
    stats_.peak_live_bytes = peak;
    stats_.peak_allocated_bytes = peak;  // every materialized register (outputs included) lives to the end
    return outputs;
  }

 private:
  ElementwiseExecutable() = default;

  void RunSegment(const Segment& segment, std::vector<at::Tensor>& tensors, std::vector<float>& scalars) const {
    // A segment of 0-dim values: evaluate once, on the scalars.
    if (registers_[segment.code.front().dst].scalar) {
      for (const Instruction& instruction : segment.code) {
        float a = scalars[instruction.a.reg];
        float b = instruction.b.reg >= 0 ? scalars[instruction.b.reg] : instruction.b.constant;
        float out = 0;
        Apply(instruction, &a, 0, &b, 0, &out, 1);
        scalars[instruction.dst] = out;
      }
      return;
    }
    at::parallel_for(0, segment.numel, kBlock, [&](int64_t begin, int64_t end) {
      // Block buffers for this thread's temporaries, one row per temporary register.
      std::vector<float> buffers(segment.temps.size() * kBlock);
      for (int64_t block = begin; block < end; block += kBlock) {
        const int64_t n = std::min(kBlock, end - block);
        for (const Instruction& instruction : segment.code) {
          int64_t a_stride = 1, b_stride = 1;
          const float* a = Address(instruction.a, block, tensors, scalars, segment, buffers, &a_stride);
          const float* b = Address(instruction.b, block, tensors, scalars, segment, buffers, &b_stride);
          int64_t unused = 1;
          float* out = const_cast<float*>(
              Address(Source{instruction.dst, 0}, block, tensors, scalars, segment, buffers, &unused));
          Apply(instruction, a, a_stride, b, b_stride, out, n);
        }
      }
    });
  }

  // Where block `block` of `source` is: a full tensor's slice, a temporary's buffer, or a
  // scalar (stride 0).
  const float* Address(const Source& source, int64_t block, std::vector<at::Tensor>& tensors,
                       const std::vector<float>& scalars, const Segment& segment, std::vector<float>& buffers,
                       int64_t* stride) const {
    if (source.reg < 0) {
      *stride = 0;
      return &source.constant;
    }
    const Register& reg = registers_[source.reg];
    if (reg.scalar) {
      *stride = 0;
      return &scalars[source.reg];
    }
    *stride = 1;
    if (reg.materialized) return tensors[source.reg].data_ptr<float>() + block;
    for (size_t t = 0; t < segment.temps.size(); ++t) {
      if (segment.temps[t] == source.reg) return buffers.data() + t * kBlock;
    }
    return nullptr;  // unreachable: Build made every non-materialized result a temporary
  }

  static void Apply(const Instruction& op, const float* a, int64_t sa, const float* b, int64_t sb, float* out,
                    int64_t n) {
    switch (op.code) {
      case OpCode::kAdd:
        if (op.use_fma) {
          for (int64_t i = 0; i < n; ++i) out[i] = std::fma(b[i * sb], op.alpha, a[i * sa]);
        } else {
          for (int64_t i = 0; i < n; ++i) out[i] = a[i * sa] + b[i * sb];
        }
        break;
      case OpCode::kSub:
        for (int64_t i = 0; i < n; ++i) out[i] = a[i * sa] - b[i * sb];
        break;
      case OpCode::kMul:
        for (int64_t i = 0; i < n; ++i) out[i] = a[i * sa] * b[i * sb];
        break;
      case OpCode::kDiv:
        for (int64_t i = 0; i < n; ++i) out[i] = a[i * sa] / b[i * sb];
        break;
      case OpCode::kNeg:
        for (int64_t i = 0; i < n; ++i) out[i] = -a[i * sa];
        break;
      case OpCode::kRelu:
        for (int64_t i = 0; i < n; ++i) {
          float x = a[i * sa];
          out[i] = std::isnan(x) ? x : (x > 0.f ? x : 0.f);
        }
        break;
    }
  }

  std::vector<Register> registers_;
  std::vector<Segment> segments_;
  std::vector<int> input_registers_;
  std::vector<int> output_registers_;
  RunStats stats_;
};

}  // namespace

Capability ElementwiseBackend::GetCapability(const Module& module, const Graph& graph) const {
  Capability capability;
  for (const Node* node : graph.nodes()) {
    std::string reason = Decline(*node);
    if (!reason.empty()) capability.unsupported.emplace_back(node, std::move(reason));
  }
  return capability;
}

absl::StatusOr<std::unique_ptr<Executable>> ElementwiseBackend::Compile(const Module& module, const Graph& graph,
                                                                        const CompileContext& context) const {
  if (!context.callees.empty()) return absl::InvalidArgumentError("the elementwise backend calls no partitions");
  // Deterministic steps need nothing more: every element is computed on its own by the
  // same code whatever the block split (no reductions, no autotuning).
  MAGI_ASSIGN_OR_RETURN(std::unique_ptr<ElementwiseExecutable> exe, ElementwiseExecutable::Build(graph));
  return std::unique_ptr<Executable>(std::move(exe));
}

MAGI_REGISTER(Backend, "elementwise", [](const ComponentOptions& options) -> absl::StatusOr<std::unique_ptr<Backend>> {
  if (!options.empty()) return absl::InvalidArgumentError("the elementwise backend takes no options");
  return std::make_unique<ElementwiseBackend>();
});

}  // namespace magi
