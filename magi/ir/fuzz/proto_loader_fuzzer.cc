// libFuzzer target for the protobuf IR loader: arbitrary bytes must give a module or
// an error, never a crash; a loaded module must print as text that parses again.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "google/protobuf/stubs/logging.h"
#include "magi/ir/parser.h"
#include "magi/ir/printer.h"
#include "magi/ir/proto_serialization.h"
#include "magi/ir/verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 16)) return 0;
  // Invalid UTF-8 in string fields is an expected input; keep protobuf's log quiet.
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)quiet;
  auto module = magi::ModuleFromBinary(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!module.ok()) return 0;
  (void)magi::VerifyModule(**module);
  std::string printed = magi::PrintModule(**module);
  auto reparsed = magi::ParseModule(printed);
  if (!reparsed.ok()) {
    std::fprintf(stderr, "a loaded module prints as unparsable text: %s\n%s\n",
                 std::string(reparsed.status().message()).c_str(), printed.c_str());
    std::abort();
  }
  return 0;
}
