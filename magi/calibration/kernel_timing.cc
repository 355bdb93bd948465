#include "magi/calibration/kernel_timing.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "magi/cost/calibration.h"
#include "magi/ir/collectives.h"

namespace magi::calibration {

double Mean(const std::vector<double>& values) {
  double sum = 0;
  for (double value : values) sum += value;
  return values.empty() ? 0 : sum / static_cast<double>(values.size());
}

std::optional<Timing> FailureLog::Unmeasurable(const Node& node, absl::string_view why, bool failed_to_run) {
  failures_.push_back(absl::StrCat(node.op(), ": ", why));
  if (failed_to_run && !IsCollectiveStart(node.op())) failed_keys_.insert(CalibrationTable::KeyOf(node));
  return std::nullopt;
}

bool FailureLog::FailedToRun(const Node& node) const { return failed_keys_.contains(CalibrationTable::KeyOf(node)); }

std::vector<std::string> FailureLog::TakeFailures() { return std::exchange(failures_, {}); }

void PrintProgress(bool enabled, const std::string& text, bool line) {
  if (!enabled) return;
  std::fprintf(stderr, "%s%s", text.c_str(), line ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace magi::calibration
