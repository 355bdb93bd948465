// ParseExampleFlags: absl::ParseCommandLine for the examples, with a --help that helps.
//
//   int main(int argc, char** argv) {
//     magi::ParseExampleFlags(argc, argv, "Trains ...\n  tools/bazel run //examples:train -- [--steps=N]",
//                             "examples/train.cc");
//
// --help (or -h, --helpfull) prints `usage` and the flags defined in `source_file` and in
// examples/compile_flags.cc (name,
// help text, default), sorted by name, to stdout and exits 0. Abseil's own --help, in the
// version Debian 12 ships (20220623), exits 1 and lists every linked flag, Abseil's own
// included. Everything else is absl::ParseCommandLine's: unknown flags and bad values exit 1
// naming the flag.
#ifndef MAGI_EXAMPLES_FLAGS_USAGE_H_
#define MAGI_EXAMPLES_FLAGS_USAGE_H_

#include <vector>

#include "absl/strings/string_view.h"

namespace magi {

std::vector<char*> ParseExampleFlags(int argc, char** argv, absl::string_view usage, absl::string_view source_file);

}  // namespace magi

#endif  // MAGI_EXAMPLES_FLAGS_USAGE_H_
