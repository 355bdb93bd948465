// libFuzzer target for the text IR parser.
//
// Properties checked on every input: parsing never crashes or hangs; if it succeeds,
// the verifier runs without crashing, and printing then re-parsing gives back the
// same text (the round-trip invariant every pass test relies on).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "magi/ir/parser.h"
#include "magi/ir/printer.h"
#include "magi/ir/verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 16)) return 0;  // large inputs add time, not coverage
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  auto module = magi::ParseModule(text);
  if (!module.ok()) return 0;
  (void)magi::VerifyModule(**module);
  std::string printed = magi::PrintModule(**module);
  auto reparsed = magi::ParseModule(printed);
  if (!reparsed.ok()) {
    std::fprintf(stderr, "printed IR does not parse: %s\n--- printed:\n%s\n", std::string(reparsed.status().message()).c_str(),
                 printed.c_str());
    std::abort();
  }
  std::string reprinted = magi::PrintModule(**reparsed);
  if (reprinted != printed) {
    std::fprintf(stderr, "round trip changed the text\n--- first:\n%s\n--- second:\n%s\n", printed.c_str(),
                 reprinted.c_str());
    std::abort();
  }
  return 0;
}
