// `magi_compare A B`: `magi compare` alone (magi/tools/compare_command.h), for machines that
// build without Protobuf (the GPU machine: tools/deterministic_gpu.sh). Exit status as
// `magi compare`: 0 identical, 3 different, 1 unreadable input, 2 bad usage.
#include <cstdio>
#include <string>

#include "magi/tools/compare_command.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: magi_compare A B  (magi-tensors-v1 dumps: PREFIX, PREFIX.json or PREFIX.bin)\n");
    return 2;
  }
  absl::StatusOr<int> code = magi::CompareTensorFiles(argv[1], argv[2]);
  if (!code.ok()) {
    std::fprintf(stderr, "magi_compare: %s\n", std::string(code.status().message()).c_str());
    return 1;
  }
  return *code;
}
