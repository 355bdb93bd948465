// Whole-step capture checked against eager LibTorch: the captured graph, run by the
// interpreter backend on the same inputs, gives the same loss and every parameter
// gradient (fp32 CPU: bitwise, since the same kernels run in the same order).
#include "magi/frontend/capture/capture.h"

#include <torch/torch.h>

#include <map>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "magi/analysis/memory_plan.h"
#include "magi/backend/interpreter/interpreter.h"
#include "magi/backend/torch_executable.h"
#include "magi/base/gtest_printers.h"
#include "magi/compat/torch_compat.h"
#include "magi/ir/parser.h"
#include "magi/ir/printer.h"
#include "magi/ir/verifier.h"
#include "magi/models/llama.h"
#include "magi/models/mlp.h"
#include "magi/module_api/module_scope.h"

namespace magi {
namespace {

using NamedTensors = std::map<std::string, at::Tensor>;

// Loss and gradients of one eager step, keyed like the graph's outputs.
NamedTensors EagerStep(torch::nn::Module& model, const LossFunction& loss_fn, const std::vector<at::Tensor>& inputs) {
  for (auto& p : model.parameters()) p.mutable_grad() = at::Tensor();
  at::Tensor loss = loss_fn(inputs);
  loss.backward();
  NamedTensors out{{"loss", loss.detach()}};
  for (const auto& item : model.named_parameters()) {
    if (item.value().grad().defined()) out[item.key() + ".grad"] = item.value().grad().clone();
  }
  for (auto& p : model.parameters()) p.mutable_grad() = at::Tensor();
  return out;
}

NamedTensors RunCaptured(const CapturedGraph& captured, torch::nn::Module& model, const std::vector<at::Tensor>& data,
                         RunStats* stats = nullptr) {
  absl::StatusOr<std::unique_ptr<TorchExecutable>> exe =
      CompileForTorch("interpreter", *captured.module, captured.graph_name);
  EXPECT_TRUE(exe.ok()) << exe.status();
  if (!exe.ok()) return {};
  absl::StatusOr<std::vector<at::Tensor>> inputs = BindInputs(captured, model, data);
  EXPECT_TRUE(inputs.ok()) << inputs.status();
  absl::StatusOr<std::vector<at::Tensor>> outputs = (*exe)->Run(*inputs);
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  if (!outputs.ok()) return {};
  if (stats != nullptr) *stats = (*exe)->last_run_stats();
  NamedTensors named;
  const auto& graph_outputs = captured.graph()->outputs();
  for (size_t i = 0; i < graph_outputs.size(); ++i) named[graph_outputs[i].name] = (*outputs)[i];
  return named;
}

// Every eager tensor has a captured twin within 1e-6 and, when `bitwise`, bitwise equal.
void ExpectSameTensors(const NamedTensors& eager, const NamedTensors& compiled, bool bitwise = true) {
  for (const auto& [name, expected] : eager) {
    auto it = compiled.find(name);
    ASSERT_NE(it, compiled.end()) << "the graph has no output " << name;
    ASSERT_EQ(it->second.sizes(), expected.sizes()) << name;
    double diff = (it->second.to(at::kDouble) - expected.to(at::kDouble)).abs().max().item<double>();
    EXPECT_LE(diff, 1e-6) << name;
    if (bitwise) EXPECT_TRUE(torch::equal(it->second, expected)) << name << " differs by up to " << diff;
  }
}

// The captured module verifies and survives a text round trip.
void ExpectWellFormed(const CapturedGraph& captured) {
  absl::Status verified = VerifyModule(*captured.module);
  EXPECT_TRUE(verified.ok()) << verified;
  std::string text = PrintModule(*captured.module);
  auto reparsed = ParseModule(text);
  ASSERT_TRUE(reparsed.ok()) << reparsed.status();
  EXPECT_EQ(PrintModule(**reparsed), text);
}

std::vector<std::string> OutputNames(const CapturedGraph& captured) {
  std::vector<std::string> names;
  for (const GraphOutput& output : captured.graph()->outputs()) names.push_back(output.name);
  return names;
}

TEST(CaptureTest, MlpTrainingStepMatchesEager) {
  torch::manual_seed(0);
  models::Mlp model(models::MlpConfig{});
  at::Tensor x = torch::randn({8, 16});
  at::Tensor y = torch::randint(0, 10, {8});
  LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) {
    return torch::nn::functional::cross_entropy(model->forward(in[0]), in[1]);
  };
  absl::StatusOr<CapturedGraph> captured = CaptureTrainingStep(*model, loss_fn, {x, y});
  ASSERT_TRUE(captured.ok()) << captured.status();
  ExpectWellFormed(*captured);
  EXPECT_EQ(OutputNames(*captured),
            (std::vector<std::string>{"loss", "fc1.weight.grad", "fc1.bias.grad", "fc2.weight.grad", "fc2.bias.grad"}));
  EXPECT_FALSE(captured->rng_state.has_value());
  EXPECT_TRUE(captured->constants.empty());
  // The model's gradients are untouched by capture.
  for (const auto& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
  ExpectSameTensors(EagerStep(*model, loss_fn, {x, y}), RunCaptured(*captured, *model, {x, y}));

  // Runs again with new inputs.
  at::Tensor x2 = torch::randn({8, 16});
  at::Tensor y2 = torch::randint(0, 10, {8});
  ExpectSameTensors(EagerStep(*model, loss_fn, {x2, y2}), RunCaptured(*captured, *model, {x2, y2}));
}

TEST(CaptureTest, TinyLlamaTrainingStepMatchesEagerWithModulePaths) {
  torch::manual_seed(1);
  models::Llama model(models::LlamaConfig::Tiny());
  at::Tensor tokens = torch::randint(0, 256, {2, 16});
  at::Tensor targets = torch::randint(0, 256, {2, 16});
  LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) {
    return models::LanguageModelLoss(model->forward(in[0]), in[1]);
  };
  absl::StatusOr<CapturedGraph> captured = CaptureTrainingStep(*model, loss_fn, {tokens, targets});
  ASSERT_TRUE(captured.ok()) << captured.status();
  ExpectWellFormed(*captured);
  EXPECT_EQ(captured->graph()->outputs().size(), 1 + model->parameters().size());
  ExpectSameTensors(EagerStep(*model, loss_fn, {tokens, targets}), RunCaptured(*captured, *model, {tokens, targets}));

  // Forward nodes carry their module path; backward nodes the path of the forward op
  // whose autograd node ran them.
  int forward_wq = 0, backward_w2 = 0;
  bool in_backward = false;
  for (const Node* node : captured->graph()->nodes()) {
    ASSERT_NE(node->annotations().phase, Phase::kUnset) << node->DebugName();
    // Forward nodes come first, then the backward ones (from backward's seed gradient on).
    if (node->annotations().phase == Phase::kBackward) in_backward = true;
    EXPECT_EQ(node->annotations().phase, in_backward ? Phase::kBackward : Phase::kForward) << node->DebugName();
    if (node->op() == "aten::ones_like") EXPECT_TRUE(in_backward);
    const std::string& path = node->annotations().module_path;
    if (!in_backward && path == "layers.1.attention.wq") ++forward_wq;
    if (in_backward && path == "layers.0.feed_forward.w2") ++backward_w2;
  }
  EXPECT_GT(forward_wq, 0);
  EXPECT_GT(backward_w2, 0);
}

TEST(CaptureTest, TiedEmbeddingsSumBothGradients) {
  torch::manual_seed(2);
  models::LlamaConfig config = models::LlamaConfig::Tiny();
  config.tie_embeddings = true;
  models::Llama model(config);
  at::Tensor tokens = torch::randint(0, 256, {2, 8});
  at::Tensor targets = torch::randint(0, 256, {2, 8});
  LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) {
    return models::LanguageModelLoss(model->forward(in[0]), in[1]);
  };
  absl::StatusOr<CapturedGraph> captured = CaptureTrainingStep(*model, loss_fn, {tokens, targets});
  ASSERT_TRUE(captured.ok()) << captured.status();
  NamedTensors eager = EagerStep(*model, loss_fn, {tokens, targets});
  NamedTensors compiled = RunCaptured(*captured, *model, {tokens, targets});
  ASSERT_TRUE(compiled.count("tok_embeddings.weight.grad"));
  ExpectSameTensors(eager, compiled);
}

TEST(CaptureTest, DropoutReplaysTheSameRandomNumbers) {
  torch::manual_seed(3);
  models::Mlp model(models::MlpConfig{16, 64, 10, /*dropout=*/0.3});
  at::Tensor x = torch::randn({8, 16});
  at::Tensor y = torch::randint(0, 10, {8});
  LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) {
    return torch::nn::functional::cross_entropy(model->forward(in[0]), in[1]);
  };
  absl::StatusOr<CapturedGraph> captured = CaptureTrainingStep(*model, loss_fn, {x, y});
  ASSERT_TRUE(captured.ok()) << captured.status();
  ASSERT_TRUE(captured->rng_state.has_value());
  EXPECT_EQ(captured->graph()->inputs().back()->name(), "rng.state");
  // Eager from the captured generator state; the interpreter restores the same state.
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  generator.set_state(*captured->rng_state);
  NamedTensors eager = EagerStep(*model, loss_fn, {x, y});
  ExpectSameTensors(eager, RunCaptured(*captured, *model, {x, y}));
  // A different state gives a different mask (the graph really draws random numbers).
  torch::manual_seed(99);
  at::Tensor other_state = at::detail::getDefaultCPUGenerator().get_state();
  auto exe = CompileForTorch("interpreter", *captured->module, captured->graph_name);
  ASSERT_TRUE(exe.ok());
  auto inputs = BindInputs(*captured, *model, {x, y}, other_state);
  ASSERT_TRUE(inputs.ok());
  auto outputs = (*exe)->Run(*inputs);
  ASSERT_TRUE(outputs.ok());
  EXPECT_FALSE(torch::equal((*outputs)[0], eager["loss"]));
}

// A module that writes through views and in place, on purpose.
struct InPlaceModel : torch::nn::Module {
  InPlaceModel() { weight = register_parameter("weight", torch::randn({4, 6})); }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = torch::matmul(x, weight);  // [n, 6]
    at::Tensor g = h.clone();
    g.narrow(1, 0, 3).mul_(2.0);   // write through a view
    g.select(1, 5).add_(1.0);      // and through another
    at::Tensor view = g.narrow(1, 2, 3);  // an alias taken before the next write
    g.relu_();
    return (view * h.narrow(1, 0, 3)).sum() + g.sum();
  }
  at::Tensor weight;
};

TEST(CaptureTest, ViewsAndInPlaceOpsAreFunctionalized) {
  torch::manual_seed(4);
  auto model = std::make_shared<InPlaceModel>();
  at::Tensor x = torch::randn({5, 4});
  LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) { return model->forward(in[0]); };
  absl::StatusOr<CapturedGraph> captured = CaptureTrainingStep(*model, loss_fn, {x});
  ASSERT_TRUE(captured.ok()) << captured.status();
  ExpectWellFormed(*captured);
  std::string text = PrintModule(*captured->module);
  for (const Node* node : captured->graph()->nodes()) {
    std::string base = node->op().substr(0, node->op().find('.'));
    EXPECT_NE(base.back(), '_') << "in-place op left in the graph: " << node->op();
  }
  // View writes go back to the base through the inverse of each view (the AliasTracker
  // that the FX importer uses), and the alias taken before relu_ is regenerated from
  // relu's result by replaying its slice.
  EXPECT_NE(text.find("aten::slice_scatter("), std::string::npos) << text;   // narrow(...).mul_
  EXPECT_NE(text.find("aten::select_scatter("), std::string::npos) << text;  // select(...).add_
  bool regenerated = false;
  for (const Node* node : captured->graph()->nodes()) {
    regenerated |= node->op() == "aten::slice.Tensor" && node->operand(0)->producer() != nullptr &&
                   node->operand(0)->producer()->op() == "aten::relu";
  }
  EXPECT_TRUE(regenerated) << text;
  ExpectSameTensors(EagerStep(*model, loss_fn, {x}), RunCaptured(*captured, *model, {x}));
}

// Writes through views on intermediates and buffers (issue 15's cases, here for capture):
// the captured graph returns what eager computes, bitwise, and every buffer the step
// wrote, however it wrote it, as <buffer>.updated with the value eager left in it.
struct ViewWriteModel : torch::nn::Module {
  ViewWriteModel() {
    lin = register_module("lin", torch::nn::Linear(4, 3));
    count = register_buffer("count", torch::zeros({4}));
    mask = register_buffer("mask", torch::ones({5}));
    stats = register_buffer("stats", torch::zeros({2, 3}));
    last = register_buffer("last", torch::zeros({3}));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor y = lin(x);                     // [n, 3], an intermediate
    at::Tensor first_cols = y.narrow(1, 0, 2);  // an alias taken before the write
    y.select(0, 0).add_(1.0);                   // x[0].add_(1) on an intermediate
    count.slice(0, 0, 2).add_(1);               // a buffer updated through a slice
    mask.slice(0, 1, 3).fill_(0.5);             // a slice fill_ on a buffer
    {
      at::NoGradGuard no_grad;
      at::alias(last).copy_(y.select(0, 1));    // copy_ into an alias of a buffer
      stats.t().select(1, 0).copy_(y.mean(0));  // and through a chain of views
    }
    return y + first_cols.sum(1, /*keepdim=*/true);  // the alias sees the write to row 0
  }
  at::Tensor Loss(const at::Tensor& x) {
    at::Tensor y = forward(x);
    return (y * mask.narrow(0, 0, 3) * count.narrow(0, 1, 3)).sum() + y.narrow(1, 0, 2).sum() * 0.5 +
           (last * stats.select(0, 1)).sum();
  }
  torch::nn::Linear lin{nullptr};
  at::Tensor count, mask, stats, last;
};

NamedTensors WithUpdatedBuffers(NamedTensors named, torch::nn::Module& model, const std::vector<std::string>& names) {
  auto buffers = model.named_buffers();
  for (const std::string& name : names) named[name + ".updated"] = buffers[name].clone();
  return named;
}

TEST(CaptureTest, WritesThroughViewsMatchEagerBitwise) {
  torch::manual_seed(15);
  auto model = std::make_shared<ViewWriteModel>();
  at::Tensor x = torch::randn({6, 4});
  const std::vector<std::string> written = {"count", "mask", "stats", "last"};
  LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) { return model->Loss(in[0]); };
  absl::StatusOr<CapturedGraph> captured = CaptureTrainingStep(*model, loss_fn, {x});
  ASSERT_TRUE(captured.ok()) << captured.status();
  ExpectWellFormed(*captured);
  EXPECT_EQ(OutputNames(*captured),
            (std::vector<std::string>{"loss", "lin.weight.grad", "lin.bias.grad", "count.updated", "mask.updated",
                                      "stats.updated", "last.updated"}));
  EXPECT_TRUE(torch::equal(model->count, torch::zeros({4})));  // capture left the buffers as they were
  NamedTensors compiled = RunCaptured(*captured, *model, {x});
  ExpectSameTensors(WithUpdatedBuffers(EagerStep(*model, loss_fn, {x}), *model, written), compiled);
  EXPECT_EQ(compiled.at("count.updated")[0].item<float>(), 1.0f);  // the writes really happened

  // Forward only, on a fresh model: the output (y with row 0 written) and the same buffers.
  torch::manual_seed(16);
  model = std::make_shared<ViewWriteModel>();
  ForwardFunction forward = [&](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{model->forward(in[0])}; };
  absl::StatusOr<CapturedGraph> inference = CaptureForward(*model, forward, {x});
  ASSERT_TRUE(inference.ok()) << inference.status();
  ExpectWellFormed(*inference);
  NamedTensors compiled_forward = RunCaptured(*inference, *model, {x});
  at::Tensor eager;
  {
    torch::NoGradGuard no_grad;
    eager = model->forward(x);
  }
  ExpectSameTensors(WithUpdatedBuffers({{"output.0", eager}}, *model, written), compiled_forward);
}

// Writes through views of tensors that do not start their storage contiguously (a
// transposed data input, a buffer that is a slice of a larger tensor) and through a dtype
// view: capture once refused these ("a view whose base is itself a partial view"); the
// tracker writes them back step by step.
TEST(CaptureTest, WritesThroughViewsOfPartialAndReinterpretedTensors) {
  struct Partial : torch::nn::Module {
    Partial() {
      weight = register_parameter("weight", torch::randn({4, 3}));
      window = register_buffer("window", torch::zeros({10}).narrow(0, 2, 4));
      bits = register_buffer("bits", torch::zeros({4}));
    }
    at::Tensor forward(const at::Tensor& x) {  // x: [4, 5] strides [1, 4]
      x.select(1, 0).add_(1.0);
      window.slice(0, 1, 3).add_(2.0);
      bits.view(torch::kInt32).slice(0, 0, 2).add_(1);  // the smallest positive floats
      return (torch::matmul(x.t(), weight) * window.narrow(0, 0, 3)).sum() + bits.sum() * 1e30;
    }
    at::Tensor weight, window, bits;
  };
  torch::manual_seed(18);
  auto model = std::make_shared<Partial>();
  at::Tensor x = torch::randn({5, 4}).t();
  ASSERT_FALSE(x.is_contiguous());
  LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) { return model->forward(in[0]); };
  absl::StatusOr<CapturedGraph> captured = CaptureTrainingStep(*model, loss_fn, {x});
  ASSERT_TRUE(captured.ok()) << captured.status();
  ExpectWellFormed(*captured);
  NamedTensors compiled = RunCaptured(*captured, *model, {x.clone().t().contiguous().t()});  // the same layout
  at::Tensor eager_x = x.clone().t().contiguous().t();
  ExpectSameTensors(WithUpdatedBuffers(EagerStep(*model, loss_fn, {eager_x}), *model, {"window", "bits"}), compiled);
  EXPECT_GT(compiled.at("bits.updated")[0].item<float>(), 0.0f);
}

// A write through a view of a tensor whose layout is dense but permuted (an elementwise
// result of a transposed tensor keeps its strides). Autograd's CopySlices then copies the
// gradient into new_empty_strided(z's sizes and strides) and writes through as_strided of
// it, which addresses memory: the tracker rebuilds that permuted layout, not a contiguous one.
TEST(CaptureTest, WritesThroughViewsOfPermutedTensorsMatchEager) {
  struct Permuted : torch::nn::Module {
    Permuted() { weight = register_parameter("weight", torch::randn({4, 6})); }
    at::Tensor forward(const at::Tensor& x) {
      at::Tensor z = torch::matmul(x, weight).t() * 2.0;  // [6, 5] strides [1, 6]
      z.select(0, 1).add_(1.0);
      z.narrow(1, 1, 2).mul_(3.0);
      return (z * z).sum();
    }
    at::Tensor weight;
  };
  torch::manual_seed(19);
  auto model = std::make_shared<Permuted>();
  at::Tensor x = torch::randn({5, 4});
  LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) { return model->forward(in[0]); };
  absl::StatusOr<CapturedGraph> captured = CaptureTrainingStep(*model, loss_fn, {x});
  ASSERT_TRUE(captured.ok()) << captured.status();
  ExpectWellFormed(*captured);
  ExpectSameTensors(EagerStep(*model, loss_fn, {x}), RunCaptured(*captured, *model, {x}));
}

// Two buffers over one storage (`half` is a view of `whole`): a write through one is seen
// by the other, as in eager, and both come back updated.
TEST(CaptureTest, BuffersSharingMemorySeeEachOthersWrites) {
  struct SharedBuffers : torch::nn::Module {
    SharedBuffers() {
      weight = register_parameter("weight", torch::randn({4, 4}));
      whole = register_buffer("whole", torch::arange(8, torch::kFloat));
      half = register_buffer("half", whole.narrow(0, 2, 4));
    }
    at::Tensor forward(const at::Tensor& x) {
      half.mul_(2.0);
      return (torch::matmul(x, weight) * whole.narrow(0, 0, 4)).sum() + whole.sum();
    }
    at::Tensor weight, whole, half;
  };
  torch::manual_seed(17);
  auto model = std::make_shared<SharedBuffers>();
  at::Tensor x = torch::randn({3, 4});
  LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) { return model->forward(in[0]); };
  absl::StatusOr<CapturedGraph> captured = CaptureTrainingStep(*model, loss_fn, {x});
  ASSERT_TRUE(captured.ok()) << captured.status();
  ExpectWellFormed(*captured);
  NamedTensors compiled = RunCaptured(*captured, *model, {x});
  ExpectSameTensors(WithUpdatedBuffers(EagerStep(*model, loss_fn, {x}), *model, {"whole", "half"}), compiled);
}

// Two buffers over one storage in layouts that cannot be derived one from the other (a
// dtype reinterpretation): reading both is fine, a write to either is refused, naming both.
TEST(CaptureTest, AWriteToMemoryWithUnknownAliasingIsRefused) {
  struct Reinterpreted : torch::nn::Module {
    Reinterpreted() {
      weight = register_parameter("weight", torch::randn({4, 4}));
      floats = register_buffer("floats", torch::zeros({4}));
      ints = register_buffer("ints", floats.view(torch::kInt32));
    }
    at::Tensor forward(const at::Tensor& x) {
      ints.add_(1);
      return (torch::matmul(x, weight) * floats).sum();
    }
    at::Tensor weight, floats, ints;
  };
  auto model = std::make_shared<Reinterpreted>();
  LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) { return model->forward(in[0]); };
  absl::StatusOr<CapturedGraph> captured = CaptureTrainingStep(*model, loss_fn, {torch::randn({2, 4})});
  ASSERT_FALSE(captured.ok());
  EXPECT_EQ(captured.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(captured.status().message(),
            "cannot capture aten::add.Scalar: it writes to a tensor whose aliasing is not known (%ints and %floats "
            "share memory in a layout Magi cannot derive one from the other); Magi cannot tell which other tensors "
            "see the write");
  EXPECT_TRUE(torch::equal(model->floats, torch::zeros({4})));  // restored
}

TEST(CaptureTest, NonContiguousAndMixedDtypeInputs) {
  torch::manual_seed(5);
  models::Mlp model(models::MlpConfig{});
  at::Tensor x = torch::randn({16, 8}).t();  // [8, 16], not contiguous
  ASSERT_FALSE(x.is_contiguous());
  at::Tensor y = torch::randint(0, 10, {8});
  LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) {
    at::Tensor logits = model->forward(in[0]);
    at::Tensor low = logits.to(at::kBFloat16).to(at::kFloat);  // a round trip through bf16
    return torch::nn::functional::cross_entropy(low, in[1]);
  };
  absl::StatusOr<CapturedGraph> captured = CaptureTrainingStep(*model, loss_fn, {x, y});
  ASSERT_TRUE(captured.ok()) << captured.status();
  EXPECT_EQ(captured->graph()->FindValue("input.0")->type().ToString(), "f32[8,16]strides[1,8]");
  EXPECT_NE(PrintModule(*captured->module).find("bf16["), std::string::npos);
  ExpectSameTensors(EagerStep(*model, loss_fn, {x, y}), RunCaptured(*captured, *model, {x, y}));
}

TEST(CaptureTest, InferenceMatchesEagerForward) {
  torch::manual_seed(6);
  models::Llama model(models::LlamaConfig::Tiny());
  model->eval();
  at::Tensor tokens = torch::randint(0, 256, {3, 12});
  ForwardFunction forward = [&](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{model->forward(in[0])}; };
  absl::StatusOr<CapturedGraph> captured = CaptureForward(*model, forward, {tokens});
  ASSERT_TRUE(captured.ok()) << captured.status();
  ExpectWellFormed(*captured);
  at::Tensor eager;
  {
    torch::NoGradGuard no_grad;
    eager = model->forward(tokens);
  }
  ExpectSameTensors({{"output.0", eager}}, RunCaptured(*captured, *model, {tokens}));
}

// Grouped-query attention (2 kv heads for 4 query heads; the repeat per group is
// unsqueeze + expand + reshape): the training step captured on real tensors matches eager
// bitwise, and the one captured on meta computes it on real weights.
TEST(CaptureTest, GroupedQueryLlamaTrainingStepMatchesEager) {
  models::LlamaConfig config = models::LlamaConfig::Tiny();
  config.n_kv_heads = 2;
  torch::manual_seed(8);
  models::Llama model(config);
  at::Tensor tokens = torch::randint(0, 256, {2, 16});
  at::Tensor targets = torch::randint(0, 256, {2, 16});
  LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) {
    return models::LanguageModelLoss(model->forward(in[0]), in[1]);
  };
  absl::StatusOr<CapturedGraph> captured = CaptureTrainingStep(*model, loss_fn, {tokens, targets});
  ASSERT_TRUE(captured.ok()) << captured.status();
  ExpectWellFormed(*captured);
  EXPECT_NE(PrintModule(*captured->module).find("f32[2,2,2,16,16]"), std::string::npos);  // the expanded kv heads
  NamedTensors eager = EagerStep(*model, loss_fn, {tokens, targets});
  EXPECT_EQ(eager.at("layers.0.attention.wk.weight.grad").sizes(), (std::vector<int64_t>{32, 64}));
  ExpectSameTensors(eager, RunCaptured(*captured, *model, {tokens, targets}));

  models::Llama meta_model(config, torch::TensorOptions().device(torch::kMeta));
  auto meta_long = torch::TensorOptions().dtype(torch::kLong).device(torch::kMeta);
  LossFunction meta_loss = [&](const std::vector<at::Tensor>& in) {
    return models::LanguageModelLoss(meta_model->forward(in[0]), in[1]);
  };
  CaptureOptions options;
  options.device = Device{DeviceType::kCpu, -1};
  absl::StatusOr<CapturedGraph> on_meta = CaptureTrainingStep(
      *meta_model, meta_loss, {torch::empty({2, 16}, meta_long), torch::empty({2, 16}, meta_long)}, options);
  ASSERT_TRUE(on_meta.ok()) << on_meta.status();
  ExpectWellFormed(*on_meta);
  ExpectSameTensors(eager, RunCaptured(*on_meta, *model, {tokens, targets}), /*bitwise=*/compat::kTorchVersion < 200);
}

// A grouped-query decode step (ForwardWithCache: one token per row at different
// positions against a 2-kv-head cache) captured and run by the interpreter gives eager's
// logits and new cache, bitwise.
TEST(CaptureTest, GroupedQueryLlamaCachedDecodeStepMatchesEager) {
  models::LlamaConfig config = models::LlamaConfig::Tiny();
  config.n_kv_heads = 2;
  config.max_seq_len = 16;
  torch::manual_seed(9);
  models::Llama model(config);
  model->eval();
  ForwardFunction step = [&](const std::vector<at::Tensor>& in) {
    models::LlamaImpl::CachedOutput out = model->ForwardWithCache(in[0], in[1], models::KvCache::FromFlat(in, 2));
    std::vector<at::Tensor> outputs{out.logits};
    for (const at::Tensor& t : out.cache.Flat()) outputs.push_back(t);
    return outputs;
  };
  std::vector<at::Tensor> inputs{torch::randint(0, 256, {2, 1}), torch::tensor({3, 7}, torch::kLong)};
  {
    torch::NoGradGuard no_grad;
    at::Tensor prompt = torch::randint(0, 256, {2, 16});
    models::KvCache prefilled =
        model->ForwardWithCache(prompt, torch::zeros({2}, torch::kLong), models::KvCache::Zeros(config, 2, 16, {}))
            .cache;
    for (const at::Tensor& t : prefilled.Flat()) inputs.push_back(t);
  }
  ASSERT_EQ(inputs[2].sizes(), (std::vector<int64_t>{2, 2, 16, 16}));
  absl::StatusOr<CapturedGraph> captured = CaptureForward(*model, step, inputs);
  ASSERT_TRUE(captured.ok()) << captured.status();
  ExpectWellFormed(*captured);
  std::vector<at::Tensor> eager;
  {
    torch::NoGradGuard no_grad;
    eager = step(inputs);
  }
  NamedTensors expected;
  for (size_t i = 0; i < eager.size(); ++i) expected[absl::StrCat("output.", i)] = eager[i];
  ASSERT_EQ(expected.size(), 5u);  // logits, then keys and values of 2 layers
  ExpectSameTensors(expected, RunCaptured(*captured, *model, inputs));
}

TEST(CaptureTest, MetaCaptureAllocatesNothingAndRunsOnRealWeights) {
  models::LlamaConfig config = models::LlamaConfig::Tiny();
  config.n_layers = 3;
  models::Llama meta_model(config, torch::TensorOptions().device(torch::kMeta));
  auto meta_long = torch::TensorOptions().dtype(torch::kLong).device(torch::kMeta);
  at::Tensor meta_tokens = torch::empty({2, 10}, meta_long);
  at::Tensor meta_targets = torch::empty({2, 10}, meta_long);
  LossFunction meta_loss = [&](const std::vector<at::Tensor>& in) {
    return models::LanguageModelLoss(meta_model->forward(in[0]), in[1]);
  };
  CaptureOptions options;
  options.device = Device{DeviceType::kCpu, -1};
  absl::StatusOr<CapturedGraph> captured = CaptureTrainingStep(*meta_model, meta_loss, {meta_tokens, meta_targets}, options);
  ASSERT_TRUE(captured.ok()) << captured.status();
  ExpectWellFormed(*captured);
  EXPECT_EQ(PrintModule(*captured->module).find("meta"), std::string::npos);  // all types say cpu

  // The graph captured on meta computes the real step for a real model of the same shape.
  torch::manual_seed(7);
  models::Llama model(config);
  at::Tensor tokens = torch::randint(0, 256, {2, 10});
  at::Tensor targets = torch::randint(0, 256, {2, 10});
  LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) {
    return models::LanguageModelLoss(model->forward(in[0]), in[1]);
  };
  // Within 1e-6 but not bitwise: on LibTorch 2.x, attention picks its kernel by device
  // (math on meta, the fused CPU kernel on real tensors), so the rounding differs.
  ExpectSameTensors(EagerStep(*model, loss_fn, {tokens, targets}), RunCaptured(*captured, *model, {tokens, targets}),
                    /*bitwise=*/compat::kTorchVersion < 200);
}

// A step captured on meta for CUDA keeps attention fused (compat/attention.h): a fused
// kernel forward and backward, no [batch, heads, seq, seq] probabilities, so its
// planned peak is below the math form's that PyTorch picks on meta for other devices.
TEST(CaptureTest, MetaCaptureForCudaKeepsAttentionFused) {
#if TORCH_VERSION_MAJOR < 2
  GTEST_SKIP() << "LibTorch 1.13 has no fused attention";
#else
  models::LlamaConfig config = models::LlamaConfig::Tiny();
  config.n_layers = 2;
  models::Llama model(config, torch::TensorOptions().device(torch::kMeta).dtype(torch::kBFloat16));
  auto meta_long = torch::TensorOptions().dtype(torch::kLong).device(torch::kMeta);
  at::Tensor tokens = torch::empty({2, 64}, meta_long);
  LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) {
    return models::LanguageModelLoss(model->forward(in[0]), in[1]);
  };
  auto capture_for = [&](DeviceType device) -> std::pair<std::map<std::string, int>, int64_t> {
    CaptureOptions options;
    options.device = Device{device, device == DeviceType::kCuda ? 0 : -1};
    absl::StatusOr<CapturedGraph> captured = CaptureTrainingStep(*model, loss_fn, {tokens, tokens}, options);
    EXPECT_TRUE(captured.ok()) << captured.status();
    if (!captured.ok()) return {};
    ExpectWellFormed(*captured);
    std::map<std::string, int> ops;
    for (const Node* node : captured->graph()->nodes()) ++ops[node->op()];
    absl::StatusOr<MemoryPlan> plan = PlanMemory(*captured->graph());
    EXPECT_TRUE(plan.ok()) << plan.status();
    return {ops, plan.ok() ? plan->peak_bytes : 0};
  };
  auto [cuda_ops, cuda_peak] = capture_for(DeviceType::kCuda);
  // Flash attention without a GPU; with one, the kernel PyTorch picks there (flash or cuDNN).
  EXPECT_EQ(cuda_ops["aten::_scaled_dot_product_flash_attention"] + cuda_ops["aten::_scaled_dot_product_cudnn_attention"],
            config.n_layers);
  EXPECT_EQ(cuda_ops["aten::_scaled_dot_product_flash_attention_backward"] +
                cuda_ops["aten::_scaled_dot_product_cudnn_attention_backward"],
            config.n_layers);
  EXPECT_EQ(cuda_ops["aten::_safe_softmax"] + cuda_ops["aten::_softmax"], 0);
  // On a machine with a GPU the kernel choice probes it with CUDA tensors: never recorded.
  EXPECT_EQ(cuda_ops["aten::_fused_sdp_choice"] + cuda_ops["aten::empty_strided"], 0);
  auto [cpu_ops, cpu_peak] = capture_for(DeviceType::kCpu);
  EXPECT_EQ(cpu_ops["aten::_scaled_dot_product_flash_attention"], 0);
  std::cout << "meta capture, planned peak: " << cuda_peak << " B for cuda (flash attention), " << cpu_peak
            << " B for cpu (PyTorch's math form on meta)\n";
  EXPECT_LT(cuda_peak, cpu_peak);
#endif
}

struct ItemModel : torch::nn::Module {
  ItemModel() { weight = register_parameter("weight", torch::randn({3})); }
  at::Tensor forward(const at::Tensor& x) {
    ScopedModulePath scope("gate");
    at::Tensor s = (x * weight).sum();
    if (s.item<float>() > 0) return s * 2;  // data-dependent control flow
    return s;
  }
  at::Tensor weight;
};

TEST(CaptureTest, DataDependentControlFlowIsAnError) {
  auto model = std::make_shared<ItemModel>();
  absl::StatusOr<CapturedGraph> captured =
      CaptureTrainingStep(*model, [&](const std::vector<at::Tensor>& in) { return model->forward(in[0]); },
                          {torch::randn({3})});
  ASSERT_FALSE(captured.ok());
  EXPECT_EQ(captured.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(captured.status().message(),
            "cannot capture aten::_local_scalar_dense in module 'gate': it reads values out of tensor data (e.g. "
            "Tensor::item() or a data-dependent shape); a captured graph cannot depend on them. Keep such logic "
            "outside the captured step");
}

TEST(CaptureTest, LossMustBeAScalarThatRequiresGrad) {
  models::Mlp model(models::MlpConfig{});
  at::Tensor x = torch::randn({2, 16});
  auto not_scalar = CaptureTrainingStep(*model, [&](const std::vector<at::Tensor>& in) { return model->forward(in[0]); }, {x});
  EXPECT_EQ(not_scalar.status().message(), "the loss function must return a scalar (0-d) tensor");
  auto no_grad = CaptureTrainingStep(*model, [&](const std::vector<at::Tensor>& in) { return in[0].sum(); }, {x});
  EXPECT_EQ(no_grad.status().message(), "the loss does not require grad: no parameter contributes to it");
}

TEST(CaptureTest, ConstantsCreatedBeforeTheStepAreLifted) {
  torch::manual_seed(8);
  models::Mlp model(models::MlpConfig{});
  at::Tensor scale = torch::full({10}, 0.5);  // not a buffer: a captured constant
  at::Tensor x = torch::randn({4, 16});
  at::Tensor y = torch::randint(0, 10, {4});
  LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) {
    return torch::nn::functional::cross_entropy(model->forward(in[0]) * scale, in[1]);
  };
  absl::StatusOr<CapturedGraph> captured = CaptureTrainingStep(*model, loss_fn, {x, y});
  ASSERT_TRUE(captured.ok()) << captured.status();
  ASSERT_EQ(captured->constants.size(), 1u);
  EXPECT_EQ(captured->constants[0].first, "constant.0");
  ExpectSameTensors(EagerStep(*model, loss_fn, {x, y}), RunCaptured(*captured, *model, {x, y}));

  CaptureOptions strict;
  strict.allow_constants = false;
  auto refused = CaptureTrainingStep(*model, loss_fn, {x, y}, strict);
  EXPECT_EQ(refused.status().message(),
            "cannot capture aten::mul.Tensor: argument 'other': a tensor created outside the captured step is used "
            "(constants are off)");
}

// A small network with batch norm: running statistics (and num_batches_tracked) are
// state the training step updates.
struct BatchNormNet : torch::nn::Module {
  BatchNormNet() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    bn = register_module("bn", torch::nn::BatchNorm1d(16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 4));
  }
  at::Tensor forward(const at::Tensor& x) { return fc2(torch::relu(bn(fc1(x)))); }
  torch::nn::Linear fc1{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
  torch::nn::Linear fc2{nullptr};
};

NamedTensors Snapshot(torch::nn::Module& model) {
  NamedTensors out;
  for (const auto& item : model.named_parameters()) out[item.key()] = item.value().detach().clone();
  for (const auto& item : model.named_buffers()) out[item.key()] = item.value().detach().clone();
  return out;
}

// Capture has no side effects (issue 14, item 6): it ran the step for real and left the
// running statistics updated once. Now the module, the data and the generator are as they
// were, and the graph returns the new statistics instead.
TEST(CaptureTest, CaptureLeavesTheModuleAsItWasAndReturnsRunningStatistics) {
  torch::manual_seed(12);
  auto model = std::make_shared<BatchNormNet>();
  {
    torch::NoGradGuard no_grad;  // statistics that are not the defaults, so a reset would show
    model->bn->running_mean.uniform_(-1, 1);
    model->bn->running_var.uniform_(0.5, 2);
  }
  at::Tensor x = torch::randn({6, 8});
  at::Tensor y = torch::randint(0, 4, {6});
  at::Tensor x_before = x.clone();
  LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) {
    return torch::nn::functional::cross_entropy(model->forward(in[0]), in[1]);
  };
  NamedTensors before = Snapshot(*model);
  at::Tensor generator_before = at::detail::getDefaultCPUGenerator().get_state();
  absl::StatusOr<CapturedGraph> captured = CaptureTrainingStep(*model, loss_fn, {x, y});
  ASSERT_TRUE(captured.ok()) << captured.status();
  ExpectWellFormed(*captured);
  NamedTensors after = Snapshot(*model);
  for (const auto& [name, tensor] : before) EXPECT_TRUE(torch::equal(after.at(name), tensor)) << name;
  EXPECT_TRUE(torch::equal(x, x_before));
  EXPECT_TRUE(torch::equal(at::detail::getDefaultCPUGenerator().get_state(), generator_before));
  for (const auto& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
  for (const char* name : {"bn.running_mean.updated", "bn.running_var.updated", "bn.num_batches_tracked.updated"}) {
    EXPECT_GE(captured->graph()->FindOutput(name), 0) << name << " missing:\n" << PrintModule(*captured->module);
  }
}

// A write no op declares (raw memory, as a kernel with an incomplete schema would do) is an
// error naming the buffer, not a graph that silently drops it; the buffer is restored.
TEST(CaptureTest, AnUndeclaredBufferWriteIsAnError) {
  struct RawWriter : torch::nn::Module {
    RawWriter() {
      weight = register_parameter("weight", torch::randn({3, 3}));
      seen = register_buffer("seen", torch::zeros({1}));
    }
    at::Tensor forward(const at::Tensor& x) {
      seen.data_ptr<float>()[0] += 1;  // not through the dispatcher
      return torch::matmul(x, weight).sum();
    }
    at::Tensor weight, seen;
  };
  auto model = std::make_shared<RawWriter>();
  LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) { return model->forward(in[0]); };
  absl::StatusOr<CapturedGraph> captured = CaptureTrainingStep(*model, loss_fn, {torch::randn({2, 3})});
  ASSERT_FALSE(captured.ok());
  EXPECT_EQ(captured.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(captured.status().message().find("the step changed buffer 'seen' through an op that does not declare"),
            std::string::npos)
      << captured.status();
  EXPECT_EQ(model->seen.item<float>(), 0.0f);
}

// N steps of the captured graph, each fed the statistics the previous one returned, match
// N eager steps bitwise, and never write the tensors bound to the graph's inputs.
TEST(CaptureTest, RunningStatisticsFedBackMatchEagerOverSteps) {
  torch::manual_seed(13);
  auto model = std::make_shared<BatchNormNet>();
  auto eager_model = std::make_shared<BatchNormNet>();
  {
    torch::NoGradGuard no_grad;
    auto from = model->named_parameters();
    for (auto& item : eager_model->named_parameters()) item.value().copy_(from[item.key()]);
  }
  LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) {
    return torch::nn::functional::cross_entropy(model->forward(in[0]), in[1]);
  };
  LossFunction eager_loss_fn = [&](const std::vector<at::Tensor>& in) {
    return torch::nn::functional::cross_entropy(eager_model->forward(in[0]), in[1]);
  };
  std::vector<std::vector<at::Tensor>> batches;
  for (int step = 0; step < 4; ++step) batches.push_back({torch::randn({6, 8}) * (step + 1), torch::randint(0, 4, {6})});
  absl::StatusOr<CapturedGraph> captured = CaptureTrainingStep(*model, loss_fn, batches[0]);
  ASSERT_TRUE(captured.ok()) << captured.status();
  auto exe = CompileForTorch("interpreter", *captured->module, captured->graph_name);
  ASSERT_TRUE(exe.ok()) << exe.status();
  const Graph& graph = *captured->graph();
  for (int step = 0; step < 4; ++step) {
    NamedTensors eager = EagerStep(*eager_model, eager_loss_fn, batches[step]);
    for (const auto& item : eager_model->named_buffers()) eager[item.key() + ".updated"] = item.value().clone();
    absl::StatusOr<std::vector<at::Tensor>> inputs = BindInputs(*captured, *model, batches[step]);
    ASSERT_TRUE(inputs.ok()) << inputs.status();
    std::vector<at::Tensor> bound_before;
    for (const at::Tensor& t : *inputs) bound_before.push_back(t.clone());
    absl::StatusOr<std::vector<at::Tensor>> outputs = (*exe)->Run(*inputs);
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    for (size_t i = 0; i < inputs->size(); ++i) {
      EXPECT_TRUE(torch::equal((*inputs)[i], bound_before[i])) << "step " << step << " wrote input "
                                                                << graph.inputs()[i]->name();
    }
    NamedTensors compiled;
    for (size_t i = 0; i < graph.outputs().size(); ++i) compiled[graph.outputs()[i].name] = (*outputs)[i];
    ExpectSameTensors(eager, compiled);
    // The caller owns the state: the next step reads what this one returned.
    torch::NoGradGuard no_grad;
    for (const auto& item : model->named_buffers()) item.value().copy_(compiled.at(item.key() + ".updated"));
  }
  EXPECT_EQ(model->bn->num_batches_tracked.item<int64_t>(), 4);
}

// A hand-written graph whose op writes an input (batch norm on the statistics themselves):
// the interpreter gives the op a copy, so the caller's tensor and the IR value stay as they were.
TEST(InterpreterTest, OpsThatWriteOperandsNeverWriteBoundInputs) {
  auto module = ParseModule(R"(module @m {
  graph @g {
    input %x: f32[4,3]
    input %w: f32[3]
    input %b: f32[3]
    input %rm: f32[3]
    input %rv: f32[3]
    %y, %mean, %invstd = aten::native_batch_norm(%x, %w, %b, %rm, %rv, true, 0.5, 1e-05) : f32[4,3], f32[3], f32[3]
    %s = aten::add.Tensor(%rm, %mean, 1) : f32[3]
    output y = %y
    output s = %s
  }
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  auto exe = CompileForTorch("interpreter", **module, "g");
  ASSERT_TRUE(exe.ok()) << exe.status();
  torch::manual_seed(14);
  std::vector<at::Tensor> inputs = {torch::randn({4, 3}), torch::ones({3}), torch::zeros({3}), torch::zeros({3}),
                                    torch::ones({3})};
  auto run = (*exe)->Run(inputs);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(torch::equal(inputs[3], torch::zeros({3})));
  EXPECT_TRUE(torch::equal(inputs[4], torch::ones({3})));
  // %rm is still zeros when add reads it: s == the batch mean.
  EXPECT_TRUE(torch::allclose((*run)[1], inputs[0].mean(0)));
}

TEST(InterpreterTest, FreesIntermediatesAfterTheirLastUse) {
  struct Chain : torch::nn::Module {
    at::Tensor forward(at::Tensor x) {
      for (int i = 0; i < 20; ++i) x = (i % 2 == 0) ? torch::relu(x + 1) : torch::neg(x);
      return x;
    }
  };
  auto model = std::make_shared<Chain>();
  at::Tensor x = torch::randn({1 << 18});  // 1 MiB
  ForwardFunction forward = [&](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{model->forward(in[0])}; };
  absl::StatusOr<CapturedGraph> captured = CaptureForward(*model, forward, {x});
  ASSERT_TRUE(captured.ok()) << captured.status();
  EXPECT_EQ(captured->graph()->num_nodes(), 30);  // 10 x (add, relu) + 10 x neg
  RunStats stats;
  NamedTensors out = RunCaptured(*captured, *model, {x}, &stats);
  EXPECT_EQ(stats.nodes_run, 30);
  int64_t one = x.numel() * 4;
  // Input, the value being consumed and the one being produced: never all 30.
  EXPECT_LE(stats.peak_live_bytes, 3 * one);
  EXPECT_GE(stats.peak_live_bytes, 2 * one);
  at::Tensor eager;
  {
    torch::NoGradGuard no_grad;
    eager = model->forward(x);
  }
  EXPECT_TRUE(torch::equal(out["output.0"], eager));
}

// The liveness-based memory plan predicts what the interpreter measures (an upper bound).
TEST(InterpreterTest, MeasuredPeakEqualsTheMemoryPlan) {
  torch::manual_seed(9);
  models::Llama model(models::LlamaConfig::Tiny());
  at::Tensor tokens = torch::randint(0, 256, {2, 16});
  LossFunction loss_fn = [&](const std::vector<at::Tensor>& in) {
    return models::LanguageModelLoss(model->forward(in[0]), in[1]);
  };
  absl::StatusOr<CapturedGraph> captured = CaptureTrainingStep(*model, loss_fn, {tokens, tokens});
  ASSERT_TRUE(captured.ok()) << captured.status();
  absl::StatusOr<MemoryPlan> plan = PlanMemory(*captured->graph());
  ASSERT_TRUE(plan.ok()) << plan.status();
  RunStats stats;
  RunCaptured(*captured, *model, {tokens, tokens}, &stats);
  // The plan never under-estimates; on this step it is 3.4% high (990,100 vs 957,076 bytes
  // measured): some kernel outputs share storage in ways the IR's types do not show.
  EXPECT_GE(plan->peak_bytes, stats.peak_live_bytes);
  EXPECT_LE(plan->peak_bytes, stats.peak_live_bytes * 105 / 100);
  EXPECT_LE(plan->total_buffer_bytes(), 2 * plan->peak_bytes);
}

TEST(InterpreterTest, BadGraphsFailWithTheNodeNamed) {
  auto module = ParseModule(R"(module @m {
  graph @g {
    input %x: f32[4]
    %y = aten::no_such_op(%x) : f32[4]
    output y = %y
  }
}
)");
  ASSERT_TRUE(module.ok());
  auto exe = CompileForTorch("interpreter", **module, "g");
  EXPECT_EQ(exe.status().message(), "graph @g: aten::no_such_op defining %y at line 4:10: LibTorch has no operator aten::no_such_op");

  auto wrong_shape = ParseModule(R"(module @m {
  graph @g {
    input %x: f32[4]
    %y = aten::neg(%x) : f32[5]
    output y = %y
  }
}
)");
  ASSERT_TRUE(wrong_shape.ok());
  auto exe2 = CompileForTorch("interpreter", **wrong_shape, "g");
  ASSERT_TRUE(exe2.ok()) << exe2.status();
  auto run = (*exe2)->Run({torch::ones({4})});
  EXPECT_EQ(run.status().message(), "graph @g: aten::neg defining %y at line 4:10: produced f32[4], the IR says f32[5]");
  auto arity = (*exe2)->Run({});
  EXPECT_EQ(arity.status().message(), "the graph takes 1 inputs, 0 were given");

  auto failing = ParseModule(R"(module @m {
  graph @g {
    input %a: f32[2,3]
    input %b: f32[2,3]
    %c = aten::mm(%a, %b) : f32[2,3] {module = "proj"}
    output c = %c
  }
}
)");
  ASSERT_TRUE(failing.ok());
  auto exe3 = CompileForTorch("interpreter", **failing, "g");
  ASSERT_TRUE(exe3.ok());
  auto kernel_error = (*exe3)->Run({torch::ones({2, 3}), torch::ones({2, 3})});
  ASSERT_FALSE(kernel_error.ok());
  EXPECT_EQ(kernel_error.status().message().substr(0, 62),
            "graph @g: aten::mm defining %c at line 5:10 in module 'proj': ");
}

}  // namespace
}  // namespace magi
