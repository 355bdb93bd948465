// Sample IR used by tests, the fuzz corpus and documentation.
#ifndef MAGI_IR_TEST_MODULES_H_
#define MAGI_IR_TEST_MODULES_H_

#include "absl/strings/string_view.h"

namespace magi::testing {

// A two-layer MLP training step with FSDP collectives over a 2-rank group: gathers of
// the sharded weights, forward, loss, backward, and reduce-scatters of the gradients.
// It exercises every syntactic feature of the text format.
extern const absl::string_view kFsdpMlpStepText;

// A small forward-only graph without collectives.
extern const absl::string_view kTinyForwardText;

}  // namespace magi::testing

#endif  // MAGI_IR_TEST_MODULES_H_
