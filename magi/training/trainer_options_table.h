// The table every trainer's options test runs (magi/frontend/fsdp:trainer_options_test,
// magi/frontend/fx:fx_trainer_options_test): one row per CompileOptions field, each either
// refused by name, or shown to reach the compile: the trainer compiles with the value
// (compile_options()), or fails with an error only that value can cause (an unknown pass,
// backend or profile by its name; an impossible budget; a wrong plan hash). A row added
// here is checked on every trainer (trainer_options_table_test checks that every option
// `magi registry` documents has a row).
#ifndef MAGI_TRAINING_TRAINER_OPTIONS_TABLE_H_
#define MAGI_TRAINING_TRAINER_OPTIONS_TABLE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "magi/compiler/compile_options.h"

namespace magi {

struct TrainerOptionCase {
  std::string field;  // as CompileOptions spells it: "optimization.passes"
  std::function<void(CompileOptions&)> set;
  enum class Expect {
    kRefused,       // Create fails with InvalidArgument "... does not take CompileOptions::<field>: ..."
    kCompiledWith,  // Create succeeds and compiled_with(trainer.compile_options()) holds
    kError,         // Create fails with `error` in its message (the value reached the compiler)
  };
  Expect expect = Expect::kCompiledWith;
  std::function<bool(const CompileOptions&)> compiled_with;
  std::string error;
  bool needs_deterministic_process = false;  // kCompiledWith rows that need EnableDeterministicMode
};

// Every row, for a trainer whose default options compile.
const std::vector<TrainerOptionCase>& TrainerOptionCases();

// Checks a row's outcome: `created` is Create's status (ok when it succeeded), `compiled`
// the trainer's compile_options() when it did (else null). "" when the row held, else why not.
std::string CheckTrainerOptionCase(const TrainerOptionCase& row, const absl::Status& created,
                                   const CompileOptions* compiled, const std::string& trainer);

}  // namespace magi

#endif  // MAGI_TRAINING_TRAINER_OPTIONS_TABLE_H_
