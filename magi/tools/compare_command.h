// `magi compare A B`: the bitwise comparison of two magi-tensors-v1 dumps, shared by the
// `magi` driver and `magi_compare` (the same command alone, without the IR's Protobuf
// dependency: the GPU machine's build has no protoc).
#ifndef MAGI_TOOLS_COMPARE_COMMAND_H_
#define MAGI_TOOLS_COMPARE_COMMAND_H_

#include <string>

#include "absl/status/statusor.h"

namespace magi {

// Prints "identical: ..." or the first differing tensor and element to stdout; returns
// the exit status (0 identical, 3 different). Unreadable files, or a LibTorch archive
// (*.pt, compared by //magi/training:compare_checkpoints), are an error.
absl::StatusOr<int> CompareTensorFiles(const std::string& a, const std::string& b);

}  // namespace magi

#endif  // MAGI_TOOLS_COMPARE_COMMAND_H_
