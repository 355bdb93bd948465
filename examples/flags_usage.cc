#include "examples/flags_usage.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"

namespace magi {

std::vector<char*> ParseExampleFlags(int argc, char** argv, absl::string_view usage, absl::string_view source_file) {
  absl::SetProgramUsageMessage(usage);
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;  // what follows is not a flag
    if (arg != "--help" && arg != "-help" && arg != "-h" && arg != "--helpfull") continue;
    std::vector<const absl::CommandLineFlag*> flags;
    for (const auto& [name, flag] : absl::GetAllFlags()) {
      // The program's own flags and the compile options every example shares.
      if (absl::EndsWith(flag->Filename(), source_file) || absl::EndsWith(flag->Filename(), "examples/compile_flags.cc")) {
        flags.push_back(flag);
      }
    }
    std::sort(flags.begin(), flags.end(),
              [](const absl::CommandLineFlag* a, const absl::CommandLineFlag* b) { return a->Name() < b->Name(); });
    std::printf("%s\n\nFlags:\n", std::string(usage).c_str());
    for (const absl::CommandLineFlag* flag : flags) {
      std::printf("  --%s  %s (default: %s)\n", std::string(flag->Name()).c_str(), flag->Help().c_str(),
                  flag->DefaultValue().c_str());
    }
    std::fflush(stdout);
    std::exit(0);
  }
  return absl::ParseCommandLine(argc, argv);
}

}  // namespace magi
