// Crash points: the places where a crash-consistency test may kill this process.
//
// Code that must leave its files loadable whatever moment it dies at (a checkpoint save)
// opens a CrashPointScope and calls CrashPoint before each step that changes the disk
// (create, write, fsync, rename, remove). Normally CrashPoint does nothing. With
//
//   MAGI_CRASH_AT=N      [MAGI_CRASH_RANK=R]
//
// in the environment, the Nth CrashPoint reached inside a scope in this process (only
// in the process whose RANK is R, when MAGI_CRASH_RANK is set) prints what it was about
// to do and raises SIGKILL: no destructor, no flush, as if the machine had lost the
// process at that instant. A test sweeps N from 1 until a run finishes without dying,
// which covers every step of the code (not timing luck).
//
// What it does not do: simulate power loss (the page cache survives SIGKILL), or fail
// a call (error paths are tested separately).
#ifndef MAGI_BASE_CRASH_POINTS_H_
#define MAGI_BASE_CRASH_POINTS_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace magi {

// Counts CrashPoint calls while alive (scopes nest; the count is process-wide).
class CrashPointScope {
 public:
  CrashPointScope();
  ~CrashPointScope();
  CrashPointScope(const CrashPointScope&) = delete;
  CrashPointScope& operator=(const CrashPointScope&) = delete;
};

// `what`: the step about to happen, e.g. "rename /ckpt/step-00000002/rank0.pt.tmp.7 -> rank0.pt".
void CrashPoint(absl::string_view what);

// Crash points reached inside scopes so far in this process.
int64_t CrashPointsReached();

}  // namespace magi

#endif  // MAGI_BASE_CRASH_POINTS_H_
