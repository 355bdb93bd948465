#include "magi/ir/dot_export.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/parser.h"
#include "magi/ir/test_modules.h"

namespace magi {
namespace {

std::string SampleDot() {
  auto module = ParseModule(testing::kFsdpMlpStepText);
  EXPECT_TRUE(module.ok());
  return ExportDot(*(*module)->FindGraph("train_step"));
}

TEST(DotExportTest, CommunicationLooksDifferentFromCompute) {
  std::string dot = SampleDot();
  // The bucketed all-gather: a hexagon with group, bytes (32*16*4 + 10*16*4 = 2688 B) and bucket.
  EXPECT_NE(dot.find("shape=hexagon, style=filled, fillcolor=\"#ffb74d\", color=\"#e65100\", penwidth=2, "
                     "label=\"magi::all_gather_start\\ngroup dp\\n2 KiB\\nbucket 0\""),
            std::string::npos)
      << dot;
  EXPECT_NE(dot.find("style=\"dashed,filled\", fillcolor=\"#fff3e0\", color=\"#e65100\", label=\"magi::wait"),
            std::string::npos);
  EXPECT_NE(dot.find("shape=box, style=filled, fillcolor=\"#bbdefb\", label=\"aten::mm\\nfc1\\nf32[8,32]\""),
            std::string::npos);
  EXPECT_NE(dot.find("[color=\"#e65100\", penwidth=2.5]"), std::string::npos);  // start -> wait edge
  EXPECT_NE(dot.find("fillcolor=\"#c8e6c9\", label=\"%fc1.weight.shard"), std::string::npos);  // a parameter
  EXPECT_NE(dot.find("label=\"odd name\""), std::string::npos);
}

TEST(DotExportTest, GraphvizAcceptsIt) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = tmp != nullptr ? tmp : "/tmp";
  std::string path = dir + "/sample.dot";
  std::ofstream(path) << SampleDot();
  if (std::system("command -v dot >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "graphviz's dot is not installed (tools/bazel installs it)";
  }
  std::string command = "dot -Tsvg '" + path + "' -o '" + dir + "/sample.svg'";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
}

}  // namespace
}  // namespace magi
