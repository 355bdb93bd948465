#include "magi/base/crash_points.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace magi {
namespace {

std::atomic<int> g_open_scopes{0};
std::atomic<int64_t> g_reached{0};

// The crash point to die at in this process (0: none), read once.
int64_t CrashTarget() {
  static const int64_t target = [] {
    const char* at = std::getenv("MAGI_CRASH_AT");
    int64_t n = 0;
    if (at == nullptr || !absl::SimpleAtoi(at, &n) || n <= 0) return int64_t{0};
    if (const char* rank = std::getenv("MAGI_CRASH_RANK")) {
      const char* mine = std::getenv("RANK");
      if (std::string(rank) != (mine != nullptr ? mine : "0")) return int64_t{0};
    }
    return n;
  }();
  return target;
}

}  // namespace

CrashPointScope::CrashPointScope() { g_open_scopes.fetch_add(1); }
CrashPointScope::~CrashPointScope() { g_open_scopes.fetch_sub(1); }

void CrashPoint(absl::string_view what) {
  if (g_open_scopes.load(std::memory_order_relaxed) == 0) return;
  int64_t reached = g_reached.fetch_add(1) + 1;
  if (reached != CrashTarget()) return;
  std::string line = absl::StrCat("magi: crash point ", reached, " (", what, "): SIGKILL\n");
  ssize_t ignored = ::write(2, line.data(), line.size());
  (void)ignored;
  ::raise(SIGKILL);
}

int64_t CrashPointsReached() { return g_reached.load(); }

}  // namespace magi
