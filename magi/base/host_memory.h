// How much memory this process can still allocate: what a step that allocates on the host
// may take before the kernel's OOM killer, not an error, ends the run.
#ifndef MAGI_BASE_HOST_MEMORY_H_
#define MAGI_BASE_HOST_MEMORY_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace magi {

// The "MemAvailable:" line of /proc/meminfo's text, in bytes (the kernel's estimate of
// what can be allocated without swapping: free memory plus reclaimable caches).
// nullopt when the line is missing or malformed.
std::optional<int64_t> ParseMemAvailable(absl::string_view meminfo);

// What the memory cgroup under `cgroup_root` (a cgroup v2 mount, or v1's memory
// controller at `cgroup_root`/memory) still allows: its limit (memory.max;
// memory.limit_in_bytes) minus its usage (memory.current; memory.usage_in_bytes), at
// least 0. The files are read at the root of the mount (a container's own cgroup, with
// cgroup namespaces) and at the path /proc/self/cgroup names, the smaller counting.
// nullopt when no limit is set ("max", or v1's near-2^63 "unlimited") or nothing is
// readable. v1's usage counts the page cache, so it errs low.
std::optional<int64_t> CgroupMemoryAvailable(const std::string& cgroup_root = "/sys/fs/cgroup");

// The smaller of MemAvailable (or, where /proc/meminfo cannot be read, the free pages
// glibc's sysconf reports, which leave the page cache out) and what this process's memory
// cgroup still allows (a container's limit, where the OOM killer acts before the host
// runs out). nullopt if none of them is known.
std::optional<int64_t> AvailableHostMemoryBytes();

}  // namespace magi

#endif  // MAGI_BASE_HOST_MEMORY_H_
