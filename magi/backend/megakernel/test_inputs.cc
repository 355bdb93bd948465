#include "magi/backend/megakernel/test_inputs.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "magi/base/file.h"
#include "magi/ir/parser.h"

namespace magi::megakernel::testing {
namespace {

at::ScalarType TorchType(DType dtype) {
  switch (dtype) {
    case DType::kBFloat16: return at::kBFloat16;
    case DType::kInt64: return at::kLong;
    default: return at::kFloat;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Module>> LoadTestGraph(absl::string_view file) {
  const std::string path = absl::StrCat("magi/backend/megakernel/testdata/", file);
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseModule(*text, path);
}

std::vector<at::Tensor> RandomInputs(const Graph& graph, const DecodeGraphMatch& match, uint64_t seed) {
  at::manual_seed(seed);
  std::vector<at::Tensor> inputs;
  for (const Value* input : graph.inputs()) {
    const TensorType& type = input->type().tensor();
    const at::TensorOptions options = at::TensorOptions().dtype(TorchType(type.dtype));
    if (input == match.tokens) {
      inputs.push_back(at::randint(match.model.vocab, type.sizes, options));
    } else if (input == match.positions) {
      inputs.push_back(at::randint(match.model.window, type.sizes, options));
    } else if (type.dtype == DType::kInt64) {
      inputs.push_back(at::zeros(type.sizes, options));
    } else if (type.sizes.size() == 1 && input->role() == InputRole::kParam) {
      inputs.push_back(1 + 0.1 * at::randn(type.sizes, options));
    } else if (input->role() == InputRole::kParam) {
      inputs.push_back(0.1 * at::randn(type.sizes, options));
    } else {
      inputs.push_back(at::randn(type.sizes, options));
    }
  }
  return inputs;
}

std::vector<at::Tensor> Clones(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : tensors) out.push_back(t.clone());
  return out;
}

double MaxDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>();
}

double MaxAbs(const at::Tensor& a) { return a.to(at::kFloat).abs().max().item<double>(); }

}  // namespace magi::megakernel::testing
