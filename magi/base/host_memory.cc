#include "magi/base/host_memory.h"

#include <unistd.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "magi/base/file.h"

namespace magi {
namespace {

// The file's text, or nullopt where it cannot be read (no such cgroup file, no /proc).
std::optional<std::string> ReadIfPresent(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return std::nullopt;
  return *std::move(text);
}

// A cgroup memory file's number; nullopt for "max", malformed text, or v1's "unlimited"
// (the largest page-aligned int64, 9223372036854771712).
std::optional<int64_t> CgroupNumber(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  int64_t value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &value) || value < 0) return std::nullopt;
  if (value >= (int64_t{1} << 62)) return std::nullopt;
  return value;
}

// Limit minus usage of the cgroup directory `dir` (v2 file names, else v1's).
std::optional<int64_t> AvailableIn(const std::string& dir) {
  for (const auto& [limit_file, usage_file] :
       {std::pair<const char*, const char*>{"memory.max", "memory.current"},
        std::pair<const char*, const char*>{"memory.limit_in_bytes", "memory.usage_in_bytes"}}) {
    std::optional<std::string> limit_text = ReadIfPresent(dir + "/" + limit_file);
    if (!limit_text) continue;
    std::optional<int64_t> limit = CgroupNumber(limit_text);
    std::optional<int64_t> usage = CgroupNumber(ReadIfPresent(dir + "/" + usage_file));
    if (!limit || !usage) return std::nullopt;  // no limit (or no usage to subtract)
    return std::max<int64_t>(0, *limit - *usage);
  }
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> ParseMemAvailable(absl::string_view meminfo) {
  for (absl::string_view line : absl::StrSplit(meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemAvailable:")) continue;
    line = absl::StripAsciiWhitespace(line);
    if (!absl::ConsumeSuffix(&line, "kB")) return std::nullopt;  // the only unit the kernel writes
    int64_t kib = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib) || kib < 0 ||
        kib > std::numeric_limits<int64_t>::max() / 1024) {
      return std::nullopt;
    }
    return kib * 1024;
  }
  return std::nullopt;
}

std::optional<int64_t> CgroupMemoryAvailable(const std::string& cgroup_root) {
  // v2 is one hierarchy at the root; v1's memory controller has its own mount.
  std::vector<std::string> dirs = {cgroup_root, cgroup_root + "/memory"};
  if (std::optional<std::string> self = ReadIfPresent("/proc/self/cgroup")) {
    for (absl::string_view line : absl::StrSplit(*self, '\n', absl::SkipEmpty())) {
      std::vector<absl::string_view> fields = absl::StrSplit(line, absl::MaxSplits(':', 2));
      if (fields.size() != 3 || fields[2] == "/") continue;
      if (fields[0] == "0" && fields[1].empty()) dirs.push_back(cgroup_root + std::string(fields[2]));
      for (absl::string_view controller : absl::StrSplit(fields[1], ',')) {
        if (controller == "memory") dirs.push_back(cgroup_root + "/memory" + std::string(fields[2]));
      }
    }
  }
  std::optional<int64_t> least;
  for (const std::string& dir : dirs) {
    if (std::optional<int64_t> available = AvailableIn(dir)) least = std::min(least.value_or(*available), *available);
  }
  return least;
}

std::optional<int64_t> AvailableHostMemoryBytes() {
  std::optional<int64_t> host;
  if (std::optional<std::string> meminfo = ReadIfPresent("/proc/meminfo")) host = ParseMemAvailable(*meminfo);
#ifdef _SC_AVPHYS_PAGES  // a glibc extension
  if (!host) {
    const long pages = ::sysconf(_SC_AVPHYS_PAGES);
    const long page_bytes = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && page_bytes > 0 && pages <= std::numeric_limits<int64_t>::max() / page_bytes) {
      host = static_cast<int64_t>(pages) * page_bytes;
    }
  }
#endif
  std::optional<int64_t> cgroup = CgroupMemoryAvailable();
  if (host && cgroup) return std::min(*host, *cgroup);
  return host ? host : cgroup;
}

}  // namespace magi
