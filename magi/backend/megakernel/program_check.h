// Proves an instruction program (instruction_program.h) correct for every order in which the
// SMs may run it: whatever the timing, each instruction reads what running the instructions
// one by one in the sequential order would have it read, and the kernel cannot deadlock.
//
// It checks, exhaustively rather than by sampling interleavings:
//  - structure: every instruction is in exactly one SM queue, each queue ascends in the
//    sequential order, each counter gets the increments it declares, every signaller of a
//    counter an instruction waits for comes before it (so the earliest unfinished
//    instruction can always run: no deadlock);
//  - ordering: with "A happens before B" when B waits for a counter A signals, or A comes
//    before B on the same SM, or through a chain of those (vector clocks over the SMs),
//    every read happens after the last write of each element it reads (no read of a stale
//    or unwritten value), and every write after the last write and after every read of the
//    value it replaces (no lost update, no read of a value overwritten too early).
// Elements are (buffer, layer, sequence, row). Tokens and the caches are the step's inputs:
// written before the step.
#ifndef MAGI_BACKEND_MEGAKERNEL_PROGRAM_CHECK_H_
#define MAGI_BACKEND_MEGAKERNEL_PROGRAM_CHECK_H_

#include "absl/status/status.h"
#include "magi/backend/megakernel/instruction_program.h"

namespace magi::megakernel {

// OK, or FailedPrecondition naming the first violation and the instructions involved
// ("#812 (o_proj layer 3 rows [0, 16) on SM 4) reads attention[seq 0][row 130], written by
// #790 (attention layer 3 kv group 1 sequence 0 on SM 77), with no wait between them").
absl::Status CheckProgram(const Program& program);

}  // namespace magi::megakernel

#endif  // MAGI_BACKEND_MEGAKERNEL_PROGRAM_CHECK_H_
