#include "magi/compiler/step_time_feedback.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"

namespace magi {
namespace {

// The file's older samples weigh at most this many times the newest run's.
constexpr int64_t kOldWeight = 4;

}  // namespace

StepTimeFeedback::StepTimeFeedback(const std::string& cache_dir, const std::string& device_key,
                                   StepTimeFeedbackOptions options)
    : options_(options),
      cache_(CalibrationCache::Open(cache_dir.empty() ? CalibrationCache::DefaultDir() : cache_dir, device_key,
                                    CalibrationSource::kSteps)),
      before_(cache_.table()),
      next_save_(std::max(1, options.first_save)) {}

bool StepTimeFeedback::Wants(int64_t run) const {
  return !failed_ && run > options_.skip_steps && recorded_steps_ < options_.max_steps;
}

absl::Status StepTimeFeedback::Flush() {
  if (failed_ || recorded_steps_ == saved_steps_ || recorded_steps_ < std::max(1, options_.first_save)) {
    return absl::OkStatus();
  }
  return Save();
}

absl::Status StepTimeFeedback::Add(int64_t run, const Graph& graph, const std::vector<double>& node_seconds) {
  if (!Wants(run)) return absl::OkStatus();
  if (current_ == nullptr || !current_->Accumulates(graph)) {
    if (current_ != nullptr) current_->AddTo(earlier_);
    current_ = std::make_unique<RunTimeAccumulator>(graph);
  }
  if (absl::Status added = current_->Add(node_seconds); !added.ok()) {
    failed_ = true;  // e.g. a runtime that recorded no node times: not asked again every step
    return added;
  }
  if (first_recorded_ == 0) first_recorded_ = run;
  last_recorded_ = run;
  ++recorded_steps_;
  if (recorded_steps_ < next_save_ && recorded_steps_ < options_.max_steps) return absl::OkStatus();
  next_save_ *= 2;
  return Save();
}

absl::Status StepTimeFeedback::Save() {
  // All of this run's samples against the entries the file had before it: writing again
  // later replaces, never adds, this run's share.
  CalibrationTable recorded = earlier_;
  if (current_ != nullptr) current_->AddTo(recorded);
  for (const auto& [key, entry] : recorded.entries()) {
    if (std::optional<double> old = before_.Find(key)) {
      cache_.Set(key, *old, before_.entries().at(key).count);  // (replacing an earlier write of this run)
      cache_.Fold(key, entry.mean_seconds, entry.count, kOldWeight * entry.count);
    } else {
      cache_.Set(key, entry.mean_seconds, entry.count);
    }
  }
  absl::Status saved = cache_.Save();
  if (!saved.ok()) {
    failed_ = true;  // not retried every step
    return saved;
  }
  saved_steps_ = recorded_steps_;
  summary_ = absl::StrCat("calibration: ", recorded.size(), " kernel times of steps ", first_recorded_, "-",
                          last_recorded_, " folded into ", cache_.path());
  if (!cache_.warning().empty()) absl::StrAppend(&summary_, " (", cache_.warning(), ")");
  return absl::OkStatus();
}

}  // namespace magi
