// Malformed text gives InvalidArgument with file:line:column and the reason.
#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/parser.h"

namespace magi {
namespace {

struct ErrorCase {
  const char* name;
  const char* text;
  const char* message;  // the exact message
};

class ParserErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(ParserErrorTest, ReportsLocationAndReason) {
  const ErrorCase& c = GetParam();
  auto module = ParseModule(c.text, "bad.mir");
  ASSERT_FALSE(module.ok()) << c.name;
  EXPECT_EQ(module.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(module.status().message(), c.message);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ParserErrorTest,
    ::testing::Values(
        ErrorCase{"empty", "", "bad.mir:1:1: expected 'module', found end of input"},
        ErrorCase{"no_name", "module {", "bad.mir:1:8: expected module name (@name), found '{'"},
        ErrorCase{"unterminated", "module @m {\n  graph @g {\n", "bad.mir:3:1: expected 'input', 'output', a node or '}', found end of input"},
        ErrorCase{"undefined_value", "module @m {\n  graph @g {\n    %y = aten::relu(%x) : f32[2]\n  }\n}",
                  "bad.mir:3:21: use of undefined value %x"},
        ErrorCase{"duplicate_value",
                  "module @m { graph @g { input %x: f32[2]\n %x = aten::relu(%x) : f32[2] } }",
                  "bad.mir:2:2: value %x is defined twice"},
        ErrorCase{"bad_dtype", "module @m { graph @g { input %x: f99[2] } }", "bad.mir:1:34: unknown dtype 'f99'"},
        ErrorCase{"bad_char", "module @m { graph @g { input %x: f32[2] $ } }", "bad.mir:1:41: unexpected character '$'"},
        ErrorCase{"bad_byte", "module @m { \xff }", "bad.mir:1:13: unexpected byte 0xff"},
        ErrorCase{"type_count",
                  "module @m { graph @g { input %x: f32[2]\n%a, %b = aten::relu(%x) : f32[2] } }",
                  "bad.mir:2:1: aten::relu names 2 results but gives 1 types"},
        ErrorCase{"missing_types", "module @m { graph @g { input %x: f32[2]\n%a = aten::relu(%x) } }",
                  "bad.mir:2:21: expected ':' and the result types, found '}'"},
        ErrorCase{"no_namespace", "module @m { graph @g { input %x: f32[2]\n%a = relu(%x) : f32[2] } }",
                  "bad.mir:2:6: op name 'relu' has no namespace (expected e.g. aten::mm)"},
        ErrorCase{"unterminated_string", "module @m { graph @g { input %x: f32[2]\n%a = aten::f(%x, \"abc) : f32[2] } }",
                  "bad.mir:2:18: unterminated string"},
        ErrorCase{"mixed_list", "module @m { graph @g { input %x: f32[2]\n%a = aten::f([%x, 1]) : f32[2] } }",
                  "bad.mir:2:14: a list mixes values (%x / none) with constants"},
        ErrorCase{"int_overflow", "module @m { graph @g { input %x: f32[99999999999999999999] } }",
                  "bad.mir:1:38: integer 99999999999999999999 is out of the int64 range"},
        ErrorCase{"bytes_overflow", "module @m { graph @g {\n  input %x: f32[4611686018427387904] } }",
                  "bad.mir:2:13: input %x: f32[4611686018427387904] is 18446744073709551616 bytes, more than int64 "
                  "can hold (at most 9223372036854775807)"},
        ErrorCase{"elements_overflow",
                  "module @m { graph @g { input %a: f32[4]\n  %c = aten::mm(%a, %a) : f32[3037000500,3037000500] } }",
                  "bad.mir:2:27: %c: f32[3037000500,3037000500] has more elements than int64 can count (at most "
                  "9223372036854775807)"},
        ErrorCase{"future_overflow",
                  "module @m { graph @g { input %a: f32[4]\n  %f, %g = magi::x(%a) : f32[2], future<f64[2,2305843009213693952]> } }",
                  "bad.mir:2:41: %g: f64[2,2305843009213693952] is 36893488147419103232 bytes, more than int64 can "
                  "hold (at most 9223372036854775807)"},
        ErrorCase{"utf8_raw_in_name", "module @m { graph @g { input %\"a\xff\": f32[2] } }",
                  "bad.mir:1:33: quoted text is not valid UTF-8 (byte 0xff)"},
        ErrorCase{"utf8_escape_in_string",
                  "module @m { graph @g { input %x: f32[2]\n%a = aten::f(%x, \"ok\\xc3\") : f32[2] } }",
                  "bad.mir:2:21: quoted text is not valid UTF-8 (byte 0xc3)"},
        ErrorCase{"utf8_overlong_symbol", "module @\"\xc0\xaf\" { }", "bad.mir:1:10: quoted text is not valid UTF-8 (byte 0xc0)"},
        ErrorCase{"utf8_surrogate_in_module_path",
                  "module @m { graph @g { input %x: f32[2]\n%a = aten::relu(%x) : f32[2] {module = \"l.\xed\xa0\x80\"} } }",
                  "bad.mir:2:43: quoted text is not valid UTF-8 (byte 0xed)"},
        ErrorCase{"negative_dim", "module @m { graph @g { input %x: f32[-2] } }", "bad.mir:1:38: negative value -2"},
        ErrorCase{"stride_count", "module @m { graph @g { input %x: f32[2,3]strides[1] } }",
                  "bad.mir:1:42: 1 strides for 2 dimensions"},
        ErrorCase{"bad_device", "module @m { graph @g { input %x: f32[2]@tpu } }",
                  "bad.mir:1:40: unknown device 'tpu' (expected cpu, meta, cuda or cuda:N)"},
        ErrorCase{"bad_role", "module @m { graph @g { input %x: f32[2] {role = weight} } }",
                  "bad.mir:1:49: unknown input role 'weight' (expected data, param, buffer, opt_state or rng)"},
        ErrorCase{"input_after_node",
                  "module @m { graph @g { input %x: f32[2]\n%a = aten::relu(%x) : f32[2]\ninput %y: f32[2] } }",
                  "bad.mir:3:1: inputs must come before the first node"},
        ErrorCase{"group_without_size", "module @m { process_group @dp {axis = \"dp\"} }",
                  "bad.mir:1:27: process group @dp has no size"},
        ErrorCase{"group_rank_count", "module @m { process_group @dp {axis = \"dp\", size = 2, ranks = [0]} }",
                  "bad.mir:1:27: process group @dp lists 1 ranks but has size 2"},
        ErrorCase{"duplicate_graph", "module @m { graph @g { } graph @g { } }",
                  "bad.mir:1:32: graph @g is defined twice"},
        ErrorCase{"bad_annotation", "module @m { graph @g { input %x: f32[2]\n%a = aten::relu(%x) : f32[2] {color = 1} } }",
                  "bad.mir:2:31: unknown annotation 'color' (expected module, stream, sched, remat, bucket or phase)"},
        ErrorCase{"bad_remat", "module @m { graph @g { input %x: f32[2]\n%a = aten::relu(%x) : f32[2] {remat = maybe} } }",
                  "bad.mir:2:39: unknown remat decision 'maybe'"},
        ErrorCase{"bad_escape", "module @m { graph @g { input %x: f32[2]\n%a = aten::f(%x, \"\\q\") : f32[2] } }",
                  "bad.mir:2:18: unknown escape '\\q'"},
        ErrorCase{"trailing", "module @m { } module @n { }", "bad.mir:1:15: expected end of input after the module, found 'module'"},
        ErrorCase{"output_undefined", "module @m { graph @g { output y = %nope } }",
                  "bad.mir:1:35: use of undefined value %nope"},
        ErrorCase{"bad_dtype_attr", "module @m { graph @g { input %x: f32[2]\n%a = aten::to(%x, dtype(f8)) : f32[2] } }",
                  "bad.mir:2:25: unknown dtype 'f8'"}),
    [](const ::testing::TestParamInfo<ErrorCase>& info) { return std::string(info.param.name); });

// Valid UTF-8, raw or escaped, is accepted; the printer escapes it and the text
// parses back to the same name.
TEST(ParserErrorTest, ValidUtf8IsAccepted) {
  auto module = ParseModule("module @m { graph @g { input %\"caf\xc3\xa9\": f32[2]\n input %\"\\xe2\\x82\\xac\": f32[2] } }");
  ASSERT_TRUE(module.ok()) << module.status();
  EXPECT_NE((*module)->FindGraph("g")->FindValue("caf\xc3\xa9"), nullptr);
  EXPECT_NE((*module)->FindGraph("g")->FindValue("\xe2\x82\xac"), nullptr);
}

TEST(ParserErrorTest, FileNameDefaultsToText) {
  auto module = ParseModule("modul");
  EXPECT_EQ(module.status().message(), "<text>:1:1: expected 'module', found 'modul'");
}

TEST(ParserErrorTest, DeeplyNestedJunkDoesNotRecurse) {
  // The grammar has no recursion; a long run of brackets is one error, not a stack overflow.
  std::string text = "module @m { graph @g { input %x: f32[2]\n%a = aten::f(" + std::string(100000, '[') + ") } }";
  auto module = ParseModule(text);
  ASSERT_FALSE(module.ok());
  EXPECT_EQ(module.status().message(), "<text>:2:15: expected a list element, found '['");
}

}  // namespace
}  // namespace magi
