// How much memory the host can still give this process: what a step that allocates on
// the host may take before the kernel's OOM killer, not an error, ends the run.
#ifndef MAGI_BASE_HOST_MEMORY_H_
#define MAGI_BASE_HOST_MEMORY_H_

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace magi {

// The "MemAvailable:" line of /proc/meminfo's text, in bytes (the kernel's estimate of
// what can be allocated without swapping: free memory plus reclaimable caches).
// nullopt when the line is missing or malformed.
std::optional<int64_t> ParseMemAvailable(absl::string_view meminfo);

// MemAvailable from /proc/meminfo; where that cannot be read (not Linux), the free pages
// sysconf reports (which leave the page cache out, so they err low). nullopt if neither.
std::optional<int64_t> AvailableHostMemoryBytes();

}  // namespace magi

#endif  // MAGI_BASE_HOST_MEMORY_H_
