// fx_run: imports FX graph files written by tools/fx_export.py, runs each with the
// interpreter and compares it with PyTorch's recorded results.
//
//   fx_run [--runs=2] [--tolerance=2e-5] A.fx.json B.fx.json ...
//
// Prints one line per file: "PASS <file> ...", "WRONG <file>: <what differs>" or
// "ERROR <file>: <why it could not be imported or run>". Exit status: 0 when every file
// passed, 1 when any is WRONG or ERROR, 2 for bad usage.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "magi/frontend/fx/fx_check.h"
#include "magi/frontend/fx/fx_importer.h"

int main(int argc, char** argv) {
  magi::FxCheckOptions options;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (absl::StartsWith(arg, "--runs=")) {
      options.runs = std::atoi(arg.c_str() + 7);
    } else if (absl::StartsWith(arg, "--tolerance=")) {
      options.tolerance = std::atof(arg.c_str() + 12);
    } else if (absl::StartsWith(arg, "--")) {
      std::cerr << "fx_run: unknown flag " << arg << "\nusage: fx_run [--runs=N] [--tolerance=X] FILE.fx.json...\n";
      return 2;
    } else {
      files.push_back(arg);
    }
  }
  if (files.empty()) {
    std::cerr << "usage: fx_run [--runs=N] [--tolerance=X] FILE.fx.json...\n";
    return 2;
  }
  bool all_passed = true;
  for (const std::string& file : files) {
    absl::StatusOr<magi::FxImport> imported = magi::ImportFxFile(file);
    absl::StatusOr<magi::FxCheck> check =
        imported.ok() ? magi::RunAndCompare(*imported, options) : absl::StatusOr<magi::FxCheck>(imported.status());
    if (!check.ok()) {
      std::cout << "ERROR " << file << ": " << check.status() << "\n";
      all_passed = false;
    } else if (!check->failures.empty()) {
      std::cout << "WRONG " << file << ": " << absl::StrJoin(check->failures, "; ") << "\n";
      all_passed = false;
    } else {
      std::cout << "PASS " << file << ": " << check->nodes << " nodes, " << check->compared << " outputs within "
                << check->worst << "\n";
    }
    std::cout.flush();
  }
  return all_passed ? 0 : 1;
}
