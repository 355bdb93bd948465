// Writes the 8B-shaped step (step_8b.h) as text IR, so LibTorch-free tools (`magi plan`,
// `magi simulate`) and scripts can work on it:
//
//   tools/bazel run //magi/benchmarks:dump_step_8b -- --layers=32 -o /tmp/step8b.mir
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "magi/base/file.h"
#include "magi/benchmarks/step_8b.h"
#include "magi/ir/printer.h"

ABSL_FLAG(int, layers, 32, "Decoder layers (32: the 8B step; fewer: a reduced version)");
ABSL_FLAG(std::string, o, "", "Output .mir file");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_o).empty()) {
    std::fprintf(stderr, "dump_step_8b: give -o FILE.mir (or --o=FILE.mir)\n");
    return 2;
  }
  absl::StatusOr<std::unique_ptr<magi::Module>> step = magi::BuildStep8B(absl::GetFlag(FLAGS_layers));
  if (!step.ok()) {
    std::fprintf(stderr, "dump_step_8b: %s\n", std::string(step.status().message()).c_str());
    return 1;
  }
  absl::Status written = magi::WriteFileAtomically(absl::GetFlag(FLAGS_o), magi::PrintModule(**step));
  if (!written.ok()) {
    std::fprintf(stderr, "dump_step_8b: %s\n", std::string(written.message()).c_str());
    return 1;
  }
  std::printf("wrote %s: %d nodes\n", absl::GetFlag(FLAGS_o).c_str(), (*step)->graphs()[0]->num_nodes());
  return 0;
}
