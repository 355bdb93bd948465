// The FX program a partition becomes: text in, Python out (the programs themselves are run
// by PyTorch's FX in //tests/partitioning:fx_program_run_test).
#include "magi/backend/inductor/fx_program.h"

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/parser.h"

namespace magi::inductor {
namespace {

std::unique_ptr<Module> Parse(const std::string& text) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(text);
  EXPECT_TRUE(module.ok()) << module.status();
  return module.ok() ? *std::move(module) : nullptr;
}

constexpr char kLinear[] = R"(module @m {
  graph @g {
    input %x: f32[4,8]
    input %fc.weight: f32[16,8] {role = param}
    input %fc.bias: f32[16] {role = param}
    %wt = aten::t(%fc.weight) : f32[8,16]strides[1,8]
    %y = aten::addmm(%fc.bias, %x, %wt, beta = 1, alpha = 1) : f32[4,16] {module = "fc"}
    %s = aten::sum.dim_IntList(%y, [1], false, dtype = none) : f32[4]
    %p.0, %p.1 = aten::split.Tensor(%y, 8, 1) : f32[4,8]strides[16,1], f32[4,8]strides[16,1]
    %z = aten::zeros([4, 8], dtype = dtype(f32), layout = 0, device = device(cpu), pin_memory = none) : f32[4,8]
    %c = aten::cat([%p.1, %z], 0) : f32[8,8]
    %e = aten::clamp(%c, -inf, 1e-05) : f32[8,8]
    %k = aten::clone(%e, memory_format = 0) : f32[8,8]
    output s = %s
    output c = %k
  }
}
)";

TEST(FxProgramTest, LinearPartition) {
  std::unique_ptr<Module> module = Parse(kLinear);
  ASSERT_NE(module, nullptr);
  absl::StatusOr<FxProgram> program = EmitFxProgram(*module->FindGraph("g"));
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(program->num_ops, 8);
  EXPECT_EQ(program->source, R"(# Partition @g of module @m: 8 torch.ops.aten calls.
# Written by Magi's inductor backend (magi/backend/inductor/fx_program.cc, format 1).
# build() returns the partition as a torch.fx.GraphModule. Its inputs are the partition's
# inputs in INPUTS order (parameters too: nothing is baked in); it returns a tuple in
# OUTPUTS order. Entries: (name, dtype, sizes, strides, device).
import operator

import torch

FORMAT = 1
GRAPH = "g"
INPUTS = [
    ("x", torch.float32, [4, 8], [8, 1], "cpu"),
    ("fc.weight", torch.float32, [16, 8], [8, 1], "cpu"),
    ("fc.bias", torch.float32, [16], [1], "cpu"),
]
OUTPUTS = [
    ("s", torch.float32, [4], [1], "cpu"),
    ("c", torch.float32, [8, 8], [8, 1], "cpu"),
]


def build():
    g = torch.fx.Graph()
    x = g.placeholder("x")
    fc_weight = g.placeholder("fc_weight")
    fc_bias = g.placeholder("fc_bias")
    # %wt = aten::t(%fc.weight) : f32[8,16]strides[1,8]
    wt = g.call_function(torch.ops.aten.t.default, (fc_weight,))
    # %y = aten::addmm(%fc.bias, %x, %wt, beta = 1, alpha = 1) : f32[4,16] {module = "fc"}
    y = g.call_function(torch.ops.aten.addmm.default, (fc_bias, x, wt), {"beta": 1, "alpha": 1})
    # %s = aten::sum.dim_IntList(%y, [1], false, dtype = none) : f32[4]
    s = g.call_function(torch.ops.aten.sum.dim_IntList, (y, [1], False), {"dtype": None})
    # %p.0, %p.1 = aten::split.Tensor(%y, 8, 1) : f32[4,8]strides[16,1], f32[4,8]strides[16,1]
    p_0_results = g.call_function(torch.ops.aten.split.Tensor, (y, 8, 1))
    p_1 = g.call_function(operator.getitem, (p_0_results, 1))
    # %z = aten::zeros([4, 8], dtype = dtype(f32), layout = 0, device = device(cpu), pin_memory = none) : f32[4,8]
    z = g.call_function(torch.ops.aten.zeros.default, ([4, 8],), {"dtype": torch.float32, "layout": torch.strided, "device": torch.device("cpu"), "pin_memory": None})
    # %c = aten::cat([%p.1, %z], 0) : f32[8,8]
    c = g.call_function(torch.ops.aten.cat.default, ([p_1, z], 0))
    # %e = aten::clamp(%c, -inf, 1e-05) : f32[8,8]
    e = g.call_function(torch.ops.aten.clamp.default, (c, float("-inf"), 1e-05))
    # %k = aten::clone(%e, memory_format = 0) : f32[8,8]
    k = g.call_function(torch.ops.aten.clone.default, (e,), {"memory_format": torch.contiguous_format})
    g.output((s, k))
    return torch.fx.GraphModule(torch.nn.Module(), g)
)");
}

// Structurally identical partitions give the same canonical text whatever their names.
TEST(FxProgramTest, CanonicalTextIgnoresNames) {
  std::unique_ptr<Module> a = Parse(R"(module @a {
  graph @one {
    input %x: f32[4]
    input %layers.0.w: f32[4] {role = param}
    %h = aten::mul.Tensor(%x, %layers.0.w) : f32[4] {module = "layers.0"}
    output h = %h
  }
}
)");
  std::unique_ptr<Module> b = Parse(R"(module @b {
  graph @two {
    input %h0: f32[4]
    input %layers.1.w: f32[4] {role = param}
    %out = aten::mul.Tensor(%h0, %layers.1.w) : f32[4] {module = "layers.1"}
    output y = %out
  }
}
)");
  std::unique_ptr<Module> c = Parse(R"(module @c {
  graph @three {
    input %x: f32[4]
    input %w: f32[4] {role = param}
    %h = aten::mul.Tensor(%x, %w) : f32[4]strides[1]
    %k = aten::mul.Tensor(%h, %w) : f32[4]
    output h = %k
  }
}
)");
  ASSERT_TRUE(a && b && c);
  absl::StatusOr<FxProgram> pa = EmitFxProgram(*a->FindGraph("one"), {/*canonical=*/true});
  absl::StatusOr<FxProgram> pb = EmitFxProgram(*b->FindGraph("two"), {/*canonical=*/true});
  absl::StatusOr<FxProgram> pc = EmitFxProgram(*c->FindGraph("three"), {/*canonical=*/true});
  ASSERT_TRUE(pa.ok() && pb.ok() && pc.ok());
  EXPECT_EQ(pa->source, pb->source);
  EXPECT_NE(pa->source, pc->source);
  EXPECT_EQ(pa->source.find("layers"), std::string::npos) << pa->source;
  EXPECT_NE(pa->source.find("v2 = g.call_function(torch.ops.aten.mul.Tensor, (v0, v1))"), std::string::npos)
      << pa->source;
  // The readable programs differ (names, comments).
  EXPECT_NE(EmitFxProgram(*a->FindGraph("one"))->source, EmitFxProgram(*b->FindGraph("two"))->source);
}

TEST(FxProgramTest, NamesBecomeDistinctIdentifiers) {
  std::unique_ptr<Module> module = Parse(R"(module @m {
  graph @g {
    input %"a b": f32[2]
    input %a.b: f32[2]
    input %1: f32[2]
    input %torch: f32[2]
    %return = aten::add.Tensor(%"a b", %a.b, alpha = 1) : f32[2]
    %2 = aten::add.Tensor(%1, %torch, alpha = 1) : f32[2]
    %3 = aten::add.Tensor(%return, %2, alpha = 1) : f32[2]
    output y = %3
  }
}
)");
  ASSERT_NE(module, nullptr);
  absl::StatusOr<FxProgram> program = EmitFxProgram(*module->FindGraph("g"));
  ASSERT_TRUE(program.ok()) << program.status();
  for (const char* line : {"    a_b = g.placeholder(\"a_b\")\n", "    a_b_1 = g.placeholder(\"a_b_1\")\n",
                           "    v1 = g.placeholder(\"v1\")\n", "    torch_1 = g.placeholder(\"torch_1\")\n",
                           "    return_1 = g.call_function(torch.ops.aten.add.Tensor, (a_b, a_b_1), {\"alpha\": 1})\n",
                           "    v2 = g.call_function(torch.ops.aten.add.Tensor, (v1, torch_1), {\"alpha\": 1})\n"}) {
    EXPECT_NE(program->source.find(line), std::string::npos) << line << "\nin\n" << program->source;
  }
}

TEST(FxProgramTest, WhyNotExpressible) {
  std::unique_ptr<Module> module = Parse(R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %x: f32[4]
    %f = magi::all_gather_start([%x], group = "dp") : future<f32[8]>
    %y = magi::wait(%f) : f32[8]
    %n = aten::no_such_op(%y) : f32[8]
    %a = aten::add.Tensor(%y, %y, alpha = 1) : f32[8]
    %s = aten::add.Tensor(%y, %y, 1, 2) : f32[8]
    output a = %a
    output n = %n
    output s = %s
  }
}
)");
  ASSERT_NE(module, nullptr);
  std::vector<Node*> nodes = module->FindGraph("g")->nodes();
  EXPECT_EQ(WhyNotFxExpressible(*nodes[0]), "not an aten op");
  EXPECT_EQ(WhyNotFxExpressible(*nodes[2]).rfind("LibTorch ", 0), 0u) << WhyNotFxExpressible(*nodes[2]);
  EXPECT_NE(WhyNotFxExpressible(*nodes[2]).find("has no operator aten::no_such_op"), std::string::npos);
  EXPECT_EQ(WhyNotFxExpressible(*nodes[3]), "");
  EXPECT_EQ(WhyNotFxExpressible(*nodes[4]), "4 arguments, but aten::add.Tensor takes 3");
  absl::StatusOr<FxProgram> program = EmitFxProgram(*module->FindGraph("g"));
  EXPECT_EQ(program.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(program.status().message().find("not an aten op"), std::string::npos) << program.status();
}

TEST(FxProgramTest, PythonStrings) {
  EXPECT_EQ(PythonString("a\"b\\c\nd\x01"), "\"a\\\"b\\\\c\\nd\\x01\"");
  EXPECT_EQ(PythonString("mean"), "\"mean\"");
}

}  // namespace
}  // namespace magi::inductor
