#include "magi/frontend/fx/fx_check.h"

#include <algorithm>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"
#include "magi/backend/torch_executable.h"

namespace magi {
namespace {

constexpr absl::string_view kExpected = "expected:";

// Largest elementwise difference of `got` from `expected`, relative to max(1, |expected|max);
// NaN where the other is NaN, and equal infinities, count as equal.
double Difference(const at::Tensor& got, const at::Tensor& expected) {
  if (expected.numel() == 0) return 0;
  if (!at::isFloatingType(expected.scalar_type()) && !at::isComplexType(expected.scalar_type())) {
    return at::equal(got.to(expected.scalar_type()), expected) ? 0 : std::numeric_limits<double>::infinity();
  }
  auto as_real = [](const at::Tensor& t) {
    at::Tensor c = t.contiguous();
    return at::isComplexType(c.scalar_type()) ? at::view_as_real(c.to(at::kComplexDouble)) : c.to(at::kDouble);
  };
  at::Tensor a = as_real(got), b = as_real(expected);
  at::Tensor same = (a == b) | (at::isnan(a) & at::isnan(b));
  at::Tensor diff = at::where(same, at::zeros_like(a), (a - b).abs());
  diff = at::where(at::isnan(diff), at::full_like(diff, std::numeric_limits<double>::infinity()), diff);
  at::Tensor finite = at::where(at::isfinite(b), b.abs(), at::zeros_like(b));
  double scale = std::max(1.0, finite.max().item<double>());
  return diff.max().item<double>() / scale;
}

}  // namespace

absl::StatusOr<FxCheck> RunAndCompare(const FxImport& imported, const FxCheckOptions& options) {
  const Graph& graph = imported.graph();
  std::vector<at::Tensor> inputs;
  for (const Value* input : graph.inputs()) {
    auto it = imported.tensors.find(input->name());
    if (it == imported.tensors.end()) {
      return absl::InvalidArgumentError(absl::StrCat("no tensor for input %", input->name()));
    }
    inputs.push_back(it->second);
  }
  int expected_count = 0;
  for (const auto& [name, tensor] : imported.tensors) {
    if (!absl::StartsWith(name, kExpected)) continue;
    ++expected_count;
    if (graph.FindOutput(name.substr(kExpected.size())) < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("PyTorch recorded '", name.substr(kExpected.size()), "', which the graph does not return"));
    }
  }
  for (const GraphOutput& output : graph.outputs()) {
    if (imported.tensors.count(absl::StrCat(kExpected, output.name)) == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("the graph returns '", output.name, "', for which PyTorch recorded no value"));
    }
  }
  MAGI_ASSIGN_OR_RETURN(std::unique_ptr<TorchExecutable> executable,
                        CompileForTorch("interpreter", *imported.module, imported.graph_name));
  if (options.communicator != nullptr) {
    for (const auto& group : imported.module->process_groups()) {
      MAGI_RETURN_IF_ERROR(executable->BindCommunicator(group->name, options.communicator));
    }
  }
  FxCheck check;
  check.nodes = graph.num_nodes();
  std::vector<at::Tensor> first;
  for (int run = 0; run < std::max(1, options.runs); ++run) {
    MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> outputs, executable->Run(inputs));
    if (run == 0) {
      first = outputs;
      continue;
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (Difference(outputs[i], first[i]) != 0) {
        check.failures.push_back(absl::StrCat("output '", graph.outputs()[i].name, "' changes from run to run"));
      }
    }
  }
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    const std::string& name = graph.outputs()[i].name;
    const at::Tensor& expected = imported.tensors.at(absl::StrCat(kExpected, name));
    const at::Tensor& got = first[i];
    ++check.compared;
    if (got.sizes() != expected.sizes() || got.scalar_type() != expected.scalar_type()) {
      check.failures.push_back(absl::StrCat("output '", name, "' is ", c10::toString(got.scalar_type()),
                                            c10::str(got.sizes()), ", PyTorch's ",
                                            c10::toString(expected.scalar_type()), c10::str(expected.sizes())));
      continue;
    }
    double diff = Difference(got, expected);
    check.worst = std::max(check.worst, diff);
    if (!(diff <= options.tolerance)) {
      check.failures.push_back(absl::StrCat("output '", name, "' differs by ", diff, " (relative to its max)"));
    }
  }
  if (check.compared != expected_count) {
    return absl::InternalError(absl::StrCat("compared ", check.compared, " outputs, PyTorch recorded ", expected_count));
  }
  return check;
}

}  // namespace magi
