// Reads text IR from stdin, verifies it, runs Magi's "dce" pass from the registry and
// prints the number of nodes before and after. Fails if the registry lacks "auto-recompute"
// (the pass that @magi//magi/search:all_passes adds to @magi//magi/passes:all_passes).
#include <iostream>
#include <iterator>
#include <string>

#include "magi/ir/parser.h"
#include "magi/ir/verifier.h"
#include "magi/passes/pass.h"
#include "magi/registry/registry.h"

int main() {
  std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  auto module = magi::ParseModule(text, "<stdin>");
  if (!module.ok()) {
    std::cerr << module.status().message() << "\n";
    return 1;
  }
  if (absl::Status status = magi::VerifyModule(**module); !status.ok()) {
    std::cerr << status.message() << "\n";
    return 1;
  }
  int before = 0, after = 0;
  for (const magi::Graph* graph : (*module)->graphs()) before += graph->num_nodes();
  auto dce = magi::Registry<magi::Pass>::Global().Create("dce");
  if (!dce.ok() || !(*dce)->Run(**module).ok()) return 1;
  for (const magi::Graph* graph : (*module)->graphs()) after += graph->num_nodes();
  if (auto recompute = magi::Registry<magi::Pass>::Global().Create("auto-recompute", {{"budget_mb", "1"}});
      !recompute.ok()) {
    std::cerr << recompute.status().message() << "\n";
    return 1;
  }
  std::cout << before << " -> " << after << "\n";
  return 0;
}
