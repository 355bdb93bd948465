// Every op of the index-check table (index_checks.h), run as a one-node graph by the
// interpreter: with the index arguments PyTorch's own forward makes it gives bitwise
// what the eager call gives; with an index out of range (or an index tensor of the wrong
// size) it fails with InvalidArgument naming the node, the argument and the value, where
// LibTorch's CPU kernel would read or write memory it does not own
// (tools/aten_index_probe.py shows which).
#include "magi/backend/common/index_checks.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "magi/backend/common/step_plan.h"
#include "magi/backend/torch_executable.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/parser.h"

namespace magi {
namespace {

using ::testing::HasSubstr;

std::string TypeText(const at::Tensor& t) {
  const char* dtype = t.scalar_type() == at::kFloat ? "f32" : t.scalar_type() == at::kLong ? "i64" : "i32";
  return absl::StrCat(dtype, "[", absl::StrJoin(t.sizes(), ","), "]");
}

at::Tensor Longs(std::vector<int64_t> values) { return at::tensor(values, at::kLong); }

// `call` names its operands %a0, %a1, ... (the inputs, in order); its results take the
// types of `like` (the eager results).
absl::StatusOr<std::vector<at::Tensor>> RunOne(const std::string& call, const std::vector<at::Tensor>& inputs,
                                               const std::vector<at::Tensor>& like) {
  std::string text = "module @m {\n  graph @g {\n";
  for (size_t i = 0; i < inputs.size(); ++i) absl::StrAppend(&text, "    input %a", i, ": ", TypeText(inputs[i]), "\n");
  std::vector<std::string> results, types;
  for (size_t i = 0; i < like.size(); ++i) {
    results.push_back(absl::StrCat("%r", i));
    types.push_back(TypeText(like[i]));
  }
  absl::StrAppend(&text, "    ", absl::StrJoin(results, ", "), " = ", call, " : ", absl::StrJoin(types, ", "), "\n");
  for (size_t i = 0; i < like.size(); ++i) absl::StrAppend(&text, "    output r", i, " = %r", i, "\n");
  absl::StrAppend(&text, "  }\n}\n");
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(text);
  if (!module.ok()) return module.status();
  absl::StatusOr<std::unique_ptr<TorchExecutable>> exe = CompileForTorch("interpreter", **module, "g");
  if (!exe.ok()) return exe.status();
  return (*exe)->Run(inputs);
}

struct Bad {
  std::string what;                  // the test's name for this variant
  int input = -1;                    // which input to replace (-1: none)
  at::Tensor replacement;
  std::string call;                  // a different call text ("" keeps the case's)
  std::vector<std::string> message;  // substrings the error must hold
};

struct Case {
  std::string op;  // "aten::name" as the table keys it
  std::string call;
  std::vector<at::Tensor> inputs;  // in range: as PyTorch's forward makes them
  std::vector<at::Tensor> eager;   // the eager results on `inputs`
  std::vector<Bad> bad;
  // Results not compared: parts of them are never written (the kernel allocates them empty).
  std::vector<size_t> uninitialized = {};
};

// Whether a kernel left `input` as `copy` was: unwritten parts of an input (log_alpha
// past each sample's lengths) may hold NaN, which at::equal never finds equal to itself.
bool Unchanged(const at::Tensor& input, const at::Tensor& copy) {
  if (!input.is_floating_point()) return at::equal(input, copy);
  return input.sizes() == copy.sizes() && at::isclose(input, copy, 0, 0, /*equal_nan=*/true).all().item<bool>();
}

void Check(const Case& c) {
  SCOPED_TRACE(c.call);
  ASSERT_NE(FindIndexCheck(c.op), nullptr) << c.op << " has no index check";
  // In range: bitwise the eager call, and the inputs are untouched.
  std::vector<at::Tensor> copies;
  for (const at::Tensor& t : c.inputs) copies.push_back(t.clone());
  absl::StatusOr<std::vector<at::Tensor>> ran = RunOne(c.call, copies, c.eager);
  ASSERT_TRUE(ran.ok()) << ran.status();
  ASSERT_EQ(ran->size(), c.eager.size());
  for (size_t i = 0; i < c.eager.size(); ++i) {
    if (std::find(c.uninitialized.begin(), c.uninitialized.end(), i) != c.uninitialized.end()) continue;
    EXPECT_TRUE(at::equal((*ran)[i], c.eager[i])) << "result " << i << ":\n" << (*ran)[i] << "\nvs\n" << c.eager[i];
  }
  for (size_t i = 0; i < c.inputs.size(); ++i) EXPECT_TRUE(Unchanged(copies[i], c.inputs[i])) << "input " << i;
  // Out of range: the node, the argument and the value, never the kernel.
  for (const Bad& bad : c.bad) {
    SCOPED_TRACE(bad.what);
    std::vector<at::Tensor> inputs = c.inputs;
    if (bad.input >= 0) inputs[bad.input] = bad.replacement;
    absl::StatusOr<std::vector<at::Tensor>> failed = RunOne(bad.call.empty() ? c.call : bad.call, inputs, c.eager);
    ASSERT_FALSE(failed.ok()) << "ran with " << bad.what;
    EXPECT_EQ(failed.status().code(), absl::StatusCode::kInvalidArgument) << failed.status();
    EXPECT_THAT(std::string(failed.status().message()), HasSubstr(absl::StrCat(c.op)));
    EXPECT_THAT(std::string(failed.status().message()), HasSubstr("defining %r0"));
    EXPECT_THAT(std::string(failed.status().message()), HasSubstr("LibTorch's CPU kernel does not check this"));
    for (const std::string& part : bad.message) EXPECT_THAT(std::string(failed.status().message()), HasSubstr(part));
  }
}

at::Tensor Weights() {
  at::manual_seed(0);
  return at::randn({10, 3});
}

TEST(IndexChecksTest, TableNamesOpsLibTorchHas) {
  std::vector<std::string> ops = IndexCheckedOps();
  EXPECT_EQ(ops.size(), 17u);
  for (const std::string& op : ops) {
    EXPECT_TRUE(c10::Dispatcher::singleton().findSchema({op, ""}).has_value()) << op;
    EXPECT_EQ(FindIndexCheck(op + ".overload"), FindIndexCheck(op)) << op;
  }
  EXPECT_EQ(FindIndexCheck("aten::index_select"), nullptr);  // its kernel checks
  EXPECT_EQ(FindIndexCheck("aten::embedding"), nullptr);
}

TEST(IndexChecksTest, EmbeddingDenseBackward) {
  at::manual_seed(1);
  at::Tensor grad = at::randn({4, 3});
  at::Tensor indices = Longs({1, 9, 1, 0});
  for (bool scale : {false, true}) {
    Case c{"aten::embedding_dense_backward",
           absl::StrCat("aten::embedding_dense_backward(%a0, %a1, 10, -1, ", scale ? "true" : "false", ")"),
           {grad, indices},
           {at::embedding_dense_backward(grad, indices, 10, -1, scale)}};
    c.bad.push_back({"past the rows", 1, Longs({1, 9, 10, 0}), "",
                     {"index argument 'indices' holds 10 at [2], outside [0, 10) (num_weights"}});
    c.bad.push_back({"negative", 1, Longs({1, -1, 1, 0}), "", {"holds -1 at [1], outside [0, 10)"}});
    Check(c);
  }
}

TEST(IndexChecksTest, EmbeddingRenorm) {
  at::Tensor weight = Weights();
  at::Tensor indices = Longs({1, 3, 3});
  at::Tensor renormed = weight.clone();
  at::embedding_renorm_(renormed, indices, 1.0, 2.0);
  Case c{"aten::embedding_renorm_", "aten::embedding_renorm_(%a0, %a1, 1.0, 2.0)", {weight, indices}, {renormed}};
  c.bad.push_back({"negative wraps in the kernel", 1, Longs({1, -1}), "", {"holds -1 at [1], outside [0, 10)"}});
  Check(c);
}

TEST(IndexChecksTest, EmbeddingBagOffsets) {
  at::Tensor weight = Weights();
  at::Tensor indices = Longs({1, 2, 4, 5, 4, 3, 2, 9});
  at::Tensor offsets = Longs({0, 3, 3, 8});  // an empty bag, and an empty last bag
  for (const char* op : {"_embedding_bag", "_embedding_bag_forward_only"}) {
    for (int mode : {0, 1, 2}) {
      auto eager = op == std::string("_embedding_bag")
                       ? at::_embedding_bag(weight, indices, offsets, false, mode)
                       : at::_embedding_bag_forward_only(weight, indices, offsets, false, mode);
      Case c{absl::StrCat("aten::", op),
             absl::StrCat("aten::", op, "(%a0, %a1, %a2, false, ", mode, ", false, none, false, -1)"),
             {weight, indices, offsets},
             {std::get<0>(eager), std::get<1>(eager), std::get<2>(eager), std::get<3>(eager)}};
      c.bad.push_back({"decreasing", 2, Longs({0, 3, 1, 8}), "",
                       {"index argument 'offsets' decreases at [2]: 1 after 3"}});
      c.bad.push_back({"past the end", 2, Longs({0, 3, 3, 9}), "",
                       {"index argument 'offsets' holds 9 at [3], outside [0, 9)"}});
      Check(c);
    }
  }
}

// The backwards get what the forward made: offset2bag, bag_size, maximum_indices.
TEST(IndexChecksTest, EmbeddingBagBackwards) {
  at::Tensor weight = Weights();
  at::Tensor indices = Longs({1, 2, 4, 5, 4, 3, 2, 9});
  at::Tensor offsets = Longs({0, 4});
  for (int mode : {0, 1, 2}) {
    for (bool padding : {false, true}) {  // sum without padding_idx: offset2bag is empty
      const int64_t padding_idx = padding ? 4 : -1;
      auto [out, offset2bag, bag_size, max_indices] =
          at::_embedding_bag(weight, indices, offsets, false, mode, false, {}, false, padding_idx);
      at::manual_seed(2);
      at::Tensor grad = at::randn(out.sizes());
      std::string tail = absl::StrCat("10, false, ", mode);
      // The dense backward takes offset2bag as the forward made it except when that is empty
      // (_embedding_bag_backward then rebuilds it from offsets).
      if (offset2bag.numel() > 0) {
        Case c{"aten::_embedding_bag_dense_backward",
               absl::StrCat("aten::_embedding_bag_dense_backward(%a0, %a1, %a2, %a3, %a4, ", tail, ", none, ",
                            padding_idx, ")"),
               {grad, indices, offset2bag, bag_size, max_indices},
               {at::_embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, max_indices, 10, false, mode,
                                                  {}, padding_idx)}};
        c.bad.push_back({"offset2bag past the bags", 2, Longs({0, 0, 0, 0, 1, 1, 1, 2}), "",
                         {"index argument 'offset2bag' holds 2 at [7], outside [0, 2) (grad.size(0)"}});
        c.bad.push_back({"offset2bag short", 2, Longs({0, 0}), "",
                         {"argument 'offset2bag' has 2 elements, expected 0 or 8"}});
        c.bad.push_back({"indices past the rows", 1, Longs({1, 2, 4, 5, 4, 3, 2, 10}), "",
                         {"index argument 'indices' holds 10 at [7], outside [0, 10)"}});
        if (mode != 0) {
          c.bad.push_back({"bag_size short", 3, Longs({4}), "", {"argument 'bag_size' has 1 elements, expected 2"}});
        }
        Check(c);
      }
      {
        Case c{"aten::_embedding_bag_backward",
               absl::StrCat("aten::_embedding_bag_backward(%a0, %a1, %a2, %a3, %a4, %a5, ", tail, ", false, none, ",
                            padding_idx, ")"),
               {grad, indices, offsets, offset2bag, bag_size, max_indices},
               {at::_embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, max_indices, 10, false,
                                            mode, false, {}, padding_idx)}};
        c.bad.push_back({"one offset too many", 2, Longs({0, 4, 6, 7}), "",
                         {"argument 'offsets' has 4 elements, expected 2 or 3"}});
        c.bad.push_back({"offsets decreasing", 2, Longs({4, 0}), "", {"'offsets' decreases at [1]: 0 after 4"}});
        c.bad.push_back({"indices negative", 1, Longs({1, 2, 4, 5, 4, -3, 2, 9}), "",
                         {"index argument 'indices' holds -3 at [5]"}});
        Check(c);
      }
    }
  }
  // per_sample_weights (sum only), whose backward takes weight and offsets too.
  at::Tensor per_sample = at::rand({8});
  auto [out, offset2bag, bag_size, max_indices] =
      at::_embedding_bag(weight, indices, offsets, false, 0, false, per_sample, false, 4);
  at::Tensor grad = at::randn(out.sizes());
  Case c{"aten::_embedding_bag_per_sample_weights_backward",
         "aten::_embedding_bag_per_sample_weights_backward(%a0, %a1, %a2, %a3, %a4, 0, 4)",
         {grad, weight, indices, offsets, offset2bag},
         {at::_embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, 0, 4)}};
  c.bad.push_back({"indices past the rows", 2, Longs({1, 2, 4, 5, 4, 3, 2, 12}), "",
                   {"index argument 'indices' holds 12 at [7], outside [0, 10) (weight.size(0)"}});
  c.bad.push_back({"offset2bag past the bags", 4, Longs({0, 0, 0, 0, 1, 1, 1, 5}), "",
                   {"index argument 'offset2bag' holds 5 at [7], outside [0, 2)"}});
  Check(c);
}

TEST(IndexChecksTest, MaxPoolBackwards) {
  at::manual_seed(3);
  for (int dims : {2, 3}) {
    std::vector<int64_t> shape = {2, 3};
    for (int d = 0; d < dims; ++d) shape.push_back(4);
    at::Tensor x = at::randn(shape);
    std::vector<int64_t> two(dims, 2), zero(dims, 0), one(dims, 1);
    auto [pooled, indices] = dims == 2 ? at::max_pool2d_with_indices(x, two) : at::max_pool3d_with_indices(x, two);
    at::Tensor grad = at::randn(pooled.sizes());
    std::string name = absl::StrCat("max_pool", dims, "d_with_indices_backward");
    std::string list2 = absl::StrCat("[", absl::StrJoin(two, ", "), "]");
    Case c{absl::StrCat("aten::", name),
           absl::StrCat("aten::", name, "(%a0, %a1, ", list2, ", ", list2, ", [", absl::StrJoin(zero, ", "), "], [",
                        absl::StrJoin(one, ", "), "], false, %a2)"),
           {grad, x, indices},
           {dims == 2 ? at::max_pool2d_with_indices_backward(grad, x, two, two, zero, one, false, indices)
                      : at::max_pool3d_with_indices_backward(grad, x, two, two, zero, one, false, indices)}};
    const int64_t plane = dims == 2 ? 16 : 64;
    at::Tensor past = indices.clone();
    past.view(-1)[5] = plane;
    c.bad.push_back({"past the plane", 2, past, "",
                     {absl::StrCat("index argument 'indices' holds ", plane, " at ",
                                   dims == 2 ? "[0, 1, 0, 1]" : "[0, 0, 1, 0, 1]", ", outside [0, ", plane, ")")}});
    Check(c);

    auto [apooled, aindices] = dims == 2 ? at::adaptive_max_pool2d(x, two) : at::adaptive_max_pool3d(x, two);
    std::string aname = absl::StrCat("adaptive_max_pool", dims, "d_backward");
    Case a{absl::StrCat("aten::", aname),
           absl::StrCat("aten::", aname, "(%a0, %a1, %a2)"),
           {grad, x, aindices},
           {dims == 2 ? at::adaptive_max_pool2d_backward(grad, x, aindices)
                      : at::adaptive_max_pool3d_backward(grad, x, aindices)}};
    at::Tensor negative = aindices.clone();
    negative.view(-1)[0] = -1;
    a.bad.push_back({"negative", 2, negative, "", {"index argument 'indices' holds -1 at [0, 0"}});
    a.bad.push_back({"indices for one channel", 2, aindices.narrow(1, 0, 1).clone(), "",
                     {"index argument 'indices' has sizes"}});
    Check(a);
  }
}

TEST(IndexChecksTest, CtcLoss) {
  at::manual_seed(4);
  at::Tensor log_probs = at::randn({6, 2, 4}).log_softmax(2);
  // Padded targets: beyond each target length the padding (9) is never read.
  at::Tensor targets = Longs({1, 2, 3, 1, 9, 9}).view({2, 3});
  auto [nll, alpha] = at::_ctc_loss(log_probs, targets, {6, 5}, {3, 1});
  // log_alpha past each sample's lengths is never written: it is compared through the backward.
  Case c{"aten::_ctc_loss", "aten::_ctc_loss(%a0, %a1, [6, 5], [3, 1], 0, false)", {log_probs, targets}, {nll, alpha}};
  c.uninitialized = {1};
  c.bad.push_back({"a target past the classes", 1, Longs({1, 2, 4, 1, 9, 9}).view({2, 3}), "",
                   {"index argument 'targets' holds 4 at [0, 2], outside [0, 4) (log_probs.size(2)"}});
  c.bad.push_back({"a negative target length", -1, {}, "aten::_ctc_loss(%a0, %a1, [6, 5], [3, -1], 0, false)",
                   {"argument 'target_lengths' holds -1 at [1], below 0"}});
  c.bad.push_back({"a negative input length", -1, {}, "aten::_ctc_loss(%a0, %a1, [6, -1], [3, 1], 0, false)",
                   {"argument 'input_lengths' holds -1 at [1], outside [0, 6]"}});
  Check(c);

  // The .Tensor overload, concatenated 1-D targets.
  at::Tensor flat = Longs({1, 2, 3, 1});
  at::Tensor input_lengths = Longs({6, 5}), target_lengths = Longs({3, 1});
  auto [nll1, alpha1] = at::_ctc_loss(log_probs, flat, input_lengths, target_lengths);
  Case t{"aten::_ctc_loss",
         "aten::_ctc_loss.Tensor(%a0, %a1, %a2, %a3, 0, false)",
         {log_probs, flat, input_lengths, target_lengths},
         {nll1, alpha1}};
  t.uninitialized = {1};
  t.bad.push_back({"a target past the classes", 1, Longs({1, 2, 3, 7}), "", {"'targets' holds 7 at [3]"}});
  t.bad.push_back({"lengths past the targets", 3, Longs({3, 2}), "",
                   {"argument 'targets' has 4 elements, fewer than the target_lengths add up to"}});
  Check(t);

  at::Tensor grad = at::rand({2});
  Case b{"aten::_ctc_loss_backward",
         "aten::_ctc_loss_backward(%a0, %a1, %a2, [6, 5], [3, 1], %a3, %a4, 0, false)",
         {grad, log_probs, targets, nll, alpha},
         {at::_ctc_loss_backward(grad, log_probs, targets, {6, 5}, {3, 1}, nll, alpha, 0)}};
  b.bad.push_back({"a target past the classes", 2, Longs({1, 2, 3, 1, 9, 9}).view({2, 3}), "",
                   {"index argument 'targets' holds 9 at [1, 1]"}});  // target_lengths[1] = 2 below
  b.bad.back().call = "aten::_ctc_loss_backward(%a0, %a1, %a2, [6, 5], [3, 2], %a3, %a4, 0, false)";
  b.bad.push_back({"a target length past the targets", -1, {},
                   "aten::_ctc_loss_backward(%a0, %a1, %a2, [6, 5], [3, 4], %a3, %a4, 0, false)",
                   {"argument 'targets' has sizes [2, 3], too small for target_lengths[1] = 4"}});
  b.bad.push_back({"log_alpha too short", 4, alpha.narrow(2, 0, 2).clone(), "",
                   {"argument 'log_alpha' has sizes [2, 6, 2], expected [2, 6, 7]"}});
  b.bad.push_back({"one neg_log_likelihood", 3, nll.narrow(0, 0, 1).clone(), "",
                   {"argument 'neg_log_likelihood' has 1 elements, expected 2"}});
  Check(b);
}

TEST(IndexChecksTest, SegmentReduce) {
  at::manual_seed(5);
  at::Tensor data = at::randn({6, 2});
  at::Tensor lengths = Longs({2, 0, 4});
  for (const char* unsafe : {"false", "true"}) {
    at::Tensor out = at::segment_reduce(data, "sum", lengths, {}, {}, 0, unsafe == std::string("true"));
    Case c{"aten::segment_reduce",
           absl::StrCat("aten::segment_reduce(%a0, \"sum\", lengths = %a1, indices = none, offsets = none, axis = 0, "
                        "unsafe = ", unsafe, ")"),
           {data, lengths},
           {out}};
    c.bad.push_back({"lengths adding up past the data", 1, Longs({2, 0, 5}), "",
                     {"index argument 'lengths' adds up to more than 6 (data.size(0)) at [2]"}});
    c.bad.push_back({"lengths adding up short", 1, Longs({2, 0, 3}), "", {"'lengths' adds up to 5 in row 0, not 6"}});
    Check(c);
  }
  // Offsets: unchecked by the kernel even when unsafe is false.
  at::Tensor offsets = Longs({0, 2, 2, 6});
  at::Tensor out = at::segment_reduce(data, "sum", {}, {}, offsets);
  Case o{"aten::segment_reduce",
         "aten::segment_reduce(%a0, \"sum\", lengths = none, indices = none, offsets = %a1, axis = 0, unsafe = false)",
         {data, offsets},
         {out}};
  o.bad.push_back({"offsets past the data", 1, Longs({0, 2, 2, 7}), "",
                   {"index argument 'offsets' holds 7 at [3], outside [0, 7) (data.size(0))"}});
  Check(o);

  at::Tensor summed = at::segment_reduce(data, "sum", lengths);
  at::Tensor grad = at::randn(summed.sizes());
  Case b{"aten::_segment_reduce_backward",
         "aten::_segment_reduce_backward(%a0, %a1, %a2, \"sum\", lengths = %a3, offsets = none, axis = 0, "
         "initial = none)",
         {grad, summed, data, lengths},
         {at::_segment_reduce_backward(grad, summed, data, "sum", lengths)}};
  b.bad.push_back({"a negative length", 3, Longs({2, -1, 5}), "", {"index argument 'lengths' holds -1 at [1]"}});
  Check(b);
}

TEST(IndexChecksTest, PackedSequences) {
  at::manual_seed(6);
  at::Tensor data = at::randn({5, 2});
  at::Tensor batch_sizes = Longs({3, 2});
  auto [padded, lengths] = at::_pad_packed_sequence(data, batch_sizes, false, 0.0, 2);
  Case c{"aten::_pad_packed_sequence",
         "aten::_pad_packed_sequence(%a0, %a1, false, 0.0, 2)",
         {data, batch_sizes},
         {padded, lengths}};
  c.bad.push_back({"a negative batch size", 1, Longs({3, -4}), "", {"index argument 'batch_sizes' holds -4 at [1], below 1"}});
  c.bad.push_back({"a zero batch size", 1, Longs({5, 0}), "", {"'batch_sizes' holds 0 at [1], below 1"}});
  Check(c);

  at::Tensor grad = at::randn({5, 2});
  Case b{"aten::_pack_padded_sequence_backward",
         "aten::_pack_padded_sequence_backward(%a0, [2, 3, 2], %a1, false)",
         {grad, batch_sizes},
         {at::_pack_padded_sequence_backward(grad, {2, 3, 2}, batch_sizes, false)}};
  b.bad.push_back({"increasing", 1, Longs({2, 3}), "", {"index argument 'batch_sizes' increases at [1]: 3 after 2"}});
  Check(b);
}

}  // namespace
}  // namespace magi
