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

DecodeTensors RandomDecodeTensors(const DecodeModel& m, uint64_t seed) {
  at::manual_seed(seed);
  const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat);
  auto weight = [&](std::initializer_list<int64_t> sizes) { return 0.1 * at::randn(sizes, f32); };
  auto norm = [&](int64_t size) { return 1 + 0.1 * at::randn({size}, f32); };
  DecodeTensors t;
  t.tokens = at::randint(m.vocab, {m.batch, 1}, f32.dtype(at::kLong));
  t.positions = at::randint(m.window, {m.batch}, f32.dtype(at::kLong));
  const at::Tensor inverse_frequency =
      at::pow(10000.0, -at::arange(0, m.head_dim, 2, f32) / static_cast<double>(m.head_dim));
  const at::Tensor angles = at::outer(at::arange(m.window, f32), inverse_frequency);  // [window, head_dim / 2]
  t.rope_cos = angles.cos();
  t.rope_sin = angles.sin();
  t.embedding = weight({m.vocab, m.dim});
  t.final_norm = norm(m.dim);
  t.lm_head = weight({m.vocab, m.dim});
  t.final_eps = 1e-5;
  for (int64_t l = 0; l < m.n_layers; ++l) {
    t.layers.push_back({norm(m.dim), weight({m.qkv_rows(), m.dim}), weight({m.dim, m.dim}), norm(m.dim),
                        weight({2 * m.ffn_hidden, m.dim}), weight({m.dim, m.ffn_hidden}),
                        at::randn({m.batch, m.n_kv_heads, m.window, m.head_dim}, f32),
                        at::randn({m.batch, m.n_kv_heads, m.window, m.head_dim}, f32), 1e-5, 1e-5});
  }
  return t;
}

DecodeTensors MapDecodeTensors(const DecodeTensors& t, const std::function<at::Tensor(const at::Tensor&)>& f) {
  DecodeTensors out = t;
  for (at::Tensor* tensor : {&out.tokens, &out.positions, &out.rope_cos, &out.rope_sin, &out.embedding,
                             &out.final_norm, &out.lm_head}) {
    *tensor = f(*tensor);
  }
  for (DecodeTensors::Layer& layer : out.layers) {
    for (at::Tensor* tensor : {&layer.attention_norm, &layer.qkv, &layer.o, &layer.ffn_norm, &layer.gate_up,
                               &layer.down, &layer.key_cache, &layer.value_cache}) {
      *tensor = f(*tensor);
    }
  }
  return out;
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
