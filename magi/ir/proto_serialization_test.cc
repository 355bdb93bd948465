#include "magi/ir/proto_serialization.h"

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/parser.h"
#include "magi/ir/printer.h"
#include "magi/ir/test_modules.h"

namespace magi {
namespace {

std::unique_ptr<Module> Sample() {
  auto module = ParseModule(testing::kFsdpMlpStepText);
  EXPECT_TRUE(module.ok()) << module.status();
  return *std::move(module);
}

TEST(ProtoSerializationTest, BinaryRoundTripIsExact) {
  std::unique_ptr<Module> module = Sample();
  absl::StatusOr<std::string> bytes = ModuleToBinary(*module);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto back = ModuleFromBinary(*bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(PrintModule(**back), PrintModule(*module));
  EXPECT_EQ(ModuleToBinary(**back).value(), *bytes);
  // Source locations travel too.
  EXPECT_EQ((*back)->FindGraph("train_step")->FindValue("h")->producer()->location().line, 12);
}

TEST(ProtoSerializationTest, JsonRoundTripIsExact) {
  std::unique_ptr<Module> module = Sample();
  auto json = ModuleToJson(*module);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_NE(json->find("\"op\": \"magi::all_gather_start\""), std::string::npos) << *json;
  auto back = ModuleFromJson(*json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(PrintModule(**back), PrintModule(*module));
}

TEST(ProtoSerializationTest, DonationTravels) {
  auto module = ParseModule(R"(module @m { graph @g {
    input %p: f32[4] {role = param}
    %p2 = aten::neg(%p) : f32[4]
    output p = %p2 {aliases = %p}
  } })");
  ASSERT_TRUE(module.ok()) << module.status();
  auto back = ModuleFromBinary(ModuleToBinary(**module).value());
  ASSERT_TRUE(back.ok()) << back.status();
  const Graph* g = (*back)->FindGraph("g");
  EXPECT_EQ(g->outputs()[0].aliases, g->FindValue("p"));
  auto json = ModuleFromJson(ModuleToJson(**module).value());
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(PrintModule(**json), PrintModule(**module));
}

TEST(ProtoSerializationTest, EmptyFloatListKeepsItsKind) {
  Graph* g = nullptr;
  Module module("m");
  g = module.AddGraph("g");
  Value* x = g->AddInput("x", Type::Tensor({DType::kFloat32, {1}}));
  g->AddNode("aten::f", {NodeArg(x), NodeArg(Attribute(std::vector<double>{}), "w")},
             {Type::Tensor({DType::kFloat32, {1}})});
  auto back = ModuleFromBinary(ModuleToBinary(module).value());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ((*back)->FindGraph("g")->nodes()[0]->FindArg("w")->kind(), AttrKind::kFloatList);
}

// Modules built in code may hold any bytes; protobuf would write invalid UTF-8 (logging
// an error) into a file no reader accepts, so writing fails instead, naming the field.
TEST(ProtoSerializationTest, InvalidUtf8IsNotWritten) {
  Module module("m");
  Graph* g = module.AddGraph("g");
  Value* x = g->AddInput("x\xff", Type::Tensor({DType::kFloat32, {1}}));
  g->AddOutput("y", x);
  absl::StatusOr<std::string> bytes = ModuleToBinary(module);
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bytes.status().message(),
            "graphs[0].inputs[0].value.name = \"x\\xff\" is not valid UTF-8 (at byte 1); protobuf cannot carry it");
  EXPECT_EQ(ModuleToJson(module).status().message(), bytes.status().message());
  // A valid non-ASCII name is fine.
  Module ok("m");
  Graph* h = ok.AddGraph("g");
  h->AddOutput("y", h->AddInput("caf\xc3\xa9", Type::Tensor({DType::kFloat32, {1}})));
  absl::StatusOr<std::string> written = ModuleToBinary(ok);
  ASSERT_TRUE(written.ok()) << written.status();
  auto back = ModuleFromBinary(*written);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_NE((*back)->FindGraph("g")->FindValue("caf\xc3\xa9"), nullptr);
}

TEST(ProtoSerializationTest, GarbageBytesAreAnError) {
  auto back = ModuleFromBinary("\xff\xff\xff\xff garbage");
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(back.status().message(), "not a valid magi.proto.ModuleProto (12 bytes could not be decoded)");
}

TEST(ProtoSerializationTest, MalformedContentNamesGraphAndNode) {
  proto::ModuleProto good = ModuleToProto(*Sample());
  struct Case {
    std::function<void(proto::ModuleProto&)> corrupt;
    std::string message;
  };
  std::vector<Case> cases = {
      {[](proto::ModuleProto& p) { p.set_ir_version(7); }, "IR version 7 is not supported (this build reads 1)"},
      {[](proto::ModuleProto& p) { p.mutable_graphs(0)->mutable_nodes(2)->mutable_results(0)->mutable_type()->mutable_tensor()->set_dtype("f128"); },
       "graph @train_step node 2 (aten::t): unknown dtype 'f128'"},
      {[](proto::ModuleProto& p) { p.mutable_graphs(0)->mutable_nodes(3)->mutable_args(0)->mutable_value()->set_operand("ghost"); },
       "graph @train_step node 3 (aten::mm): undefined value %ghost"},
      {[](proto::ModuleProto& p) { p.mutable_graphs(0)->mutable_nodes(3)->mutable_results(0)->set_name("x"); },
       "graph @train_step node 3 (aten::mm): value %x is defined twice"},
      {[](proto::ModuleProto& p) { p.mutable_graphs(0)->mutable_nodes(3)->set_op("mm"); },
       "graph @train_step node 3 (mm): invalid op name (expected namespace::name, e.g. aten::mm)"},
      {[](proto::ModuleProto& p) { p.mutable_graphs(0)->mutable_nodes(3)->set_op("aten::ones_li]e"); },
       "graph @train_step node 3 (aten::ones_li]e): invalid op name (expected namespace::name, e.g. aten::mm)"},
      {[](proto::ModuleProto& p) { p.mutable_graphs(0)->mutable_nodes(4)->mutable_args(1)->set_name("approx imate"); },
       "graph @train_step node 4 (aten::gelu): invalid argument name 'approx imate'"},
      {[](proto::ModuleProto& p) { p.mutable_graphs(0)->mutable_nodes(3)->mutable_args(1)->clear_value(); },
       "graph @train_step node 3 (aten::mm): argument '' has no value"},
      {[](proto::ModuleProto& p) { p.mutable_graphs(0)->mutable_inputs(0)->set_role("teacher"); },
       "graph @train_step input %x: unknown role 'teacher'"},
      {[](proto::ModuleProto& p) { p.mutable_graphs(0)->mutable_outputs(0)->set_value("nowhere"); },
       "graph @train_step output 'loss': undefined value %nowhere"},
      {[](proto::ModuleProto& p) { p.mutable_process_groups(0)->set_size(0); },
       "process group @dp: size 0 with 2 ranks"},
      {[](proto::ModuleProto& p) { p.mutable_graphs(0)->mutable_inputs(0)->mutable_value()->mutable_type()->mutable_tensor()->set_device("gpu"); },
       "graph @train_step input %x: unknown device 'gpu' (expected cpu, meta, cuda or cuda:N)"},
      {[](proto::ModuleProto& p) { p.mutable_graphs(0)->mutable_inputs(0)->mutable_value()->mutable_type()->mutable_tensor()->add_sizes(-7); },
       "graph @train_step input %x: negative size -7"},
  };
  for (const Case& c : cases) {
    proto::ModuleProto bad = good;
    c.corrupt(bad);
    auto loaded = ModuleFromProto(bad);
    ASSERT_FALSE(loaded.ok()) << c.message;
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(loaded.status().message(), c.message);
  }
}

TEST(ProtoSerializationTest, BadJsonIsAnError) {
  auto back = ModuleFromJson("{\"graphs\": 3}");
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(back.status().message().substr(0, 17), "invalid IR JSON: ");
}

}  // namespace
}  // namespace magi
