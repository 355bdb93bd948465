#include "magi/compiler/compile_options.h"

namespace magi {

const std::vector<CompileOptionDoc>& DocumentedCompileOptions() {
  static const auto* docs = new std::vector<CompileOptionDoc>{
      {"deterministic",
       "bitwise-identical losses, parameters and outputs run after run (same hardware kind, world size, model, data, "
       "Magi version); the plan is fixed and hashed, backends refuse what is not reproducible "
       "(docs/deterministic.md)"},
      {"batch_invariant_sequences",
       "N > 1: a one-sequence forward is unrolled to N sequences (pass batch-invariant), so each sequence's outputs "
       "are bitwise independent of the batch"},
      {"optimization.weight_preparation",
       "inference: linears sharing an input concatenated (concat-matmuls) and the weight-only work moved to a graph "
       "run once per weight change (<graph>.prep)"},
      {"expected_plan_hash", "fail the compile unless the plan hash is this one (pin an earlier run's plan)"},
  };
  return *docs;
}

}  // namespace magi
