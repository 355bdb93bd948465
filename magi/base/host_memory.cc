#include "magi/base/host_memory.h"

#include <unistd.h>

#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace magi {

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

std::optional<int64_t> AvailableHostMemoryBytes() {
  std::ifstream file("/proc/meminfo");
  if (file) {
    std::ostringstream text;
    text << file.rdbuf();
    if (std::optional<int64_t> available = ParseMemAvailable(text.str())) return available;
  }
  const long pages = ::sysconf(_SC_AVPHYS_PAGES);
  const long page_bytes = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_bytes <= 0 || pages > std::numeric_limits<int64_t>::max() / page_bytes) return std::nullopt;
  return static_cast<int64_t>(pages) * page_bytes;
}

}  // namespace magi
