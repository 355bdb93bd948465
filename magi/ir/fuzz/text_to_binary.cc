// Writes a text IR module as binary protobuf IR: the proto fuzzer's seed, made from the
// checked-in text sample at build time with the IR's own libraries only (the `magi convert`
// command does the same, but the magi tool sits above the IR, on passes, compiler and
// backends, which magi/ir's targets must not depend on).
//
//   text_to_binary IN.mir OUT.pb
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "magi/base/file.h"
#include "magi/ir/module.h"
#include "magi/ir/parser.h"
#include "magi/ir/proto_serialization.h"

namespace {

absl::Status Convert(const std::string& in, const std::string& out) {
  absl::StatusOr<std::string> text = magi::ReadFile(in);
  if (!text.ok()) return text.status();
  absl::StatusOr<std::unique_ptr<magi::Module>> module = magi::ParseModule(*text, in);
  if (!module.ok()) return module.status();
  absl::StatusOr<std::string> binary = magi::ModuleToBinary(**module);
  if (!binary.ok()) return binary.status();
  return magi::WriteFileAtomically(out, *binary);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s IN.mir OUT.pb\n", argv[0]);
    return 2;
  }
  absl::Status status = Convert(argv[1], argv[2]);
  if (!status.ok()) {
    std::fprintf(stderr, "text_to_binary: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
