#include "magi/compiler/auto_calibration.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "magi/base/check.h"
#include "magi/base/status_macros.h"
#include "magi/ir/collectives.h"
#include "magi/ir/magi_ops.h"

namespace magi {

AutoCalibration::AutoCalibration(std::shared_ptr<KernelCalibrator> calibrator, const std::string& cache_dir,
                                 CalibrationTable* table, bool deterministic)
    : calibrator_(std::move(calibrator)),
      table_(table),
      cache_(CalibrationCache::Open(cache_dir.empty() ? CalibrationCache::DefaultDir() : cache_dir,
                                    calibrator_->DeviceKey())),
      steps_cache_(CalibrationCache::Open(cache_dir.empty() ? CalibrationCache::DefaultDir() : cache_dir,
                                          calibrator_->DeviceKey(), CalibrationSource::kSteps)) {
  MAGI_CHECK(table_ != nullptr);
  if (deterministic) {
    pinned_ = CalibrationCache::Open(cache_dir.empty() ? CalibrationCache::DefaultDir() : cache_dir,
                                     calibrator_->DeviceKey(), CalibrationSource::kPinned);
  }
  for (const CalibrationCache* cache : {&cache_, &steps_cache_, pinned_ ? &*pinned_ : nullptr}) {
    if (cache != nullptr && !cache->warning().empty()) {
      warnings_.push_back(absl::StrCat("warning: calibration cache ", cache->warning()));
    }
  }
  const CalibrationCache& primary = pinned_ ? *pinned_ : cache_;
  stats_.table_path = primary.path();
  stats_.table_hash = primary.hash();
  stats_.planned_hash = CalibrationCache::HashOf(*table_);
}

absl::Status AutoCalibration::Calibrate(const Graph& graph) {
  // One representative per key the table lacks, in program order (the same on every
  // rank): compute kernels, then collectives.
  std::vector<KernelRequest> compute, collectives;
  std::vector<std::string> compute_keys, collective_keys;
  std::set<std::string> seen;
  for (const Node* node : graph.nodes()) {
    if (node->op() == kWaitOp || node->op() == kCallOp) continue;
    std::string key = CalibrationTable::KeyOf(*node);
    if (table_->Find(key) || unmeasurable_.count(key) || !seen.insert(key).second) continue;
    KernelRequest request;
    request.node = node;
    // A pinned time is final; what real steps took beats a micro-run of the kernel alone.
    if (pinned_) request.known = pinned_->table().Find(key);
    if (request.known) {
      known_from_pinned_.insert(key);
    } else if ((request.known = steps_cache_.table().Find(key))) {
      known_from_steps_.insert(key);
    } else {
      request.known = cache_.table().Find(key);
    }
    const bool collective = IsCollectiveStart(node->op());
    (collective ? collectives : compute).push_back(request);
    (collective ? collective_keys : compute_keys).push_back(std::move(key));
  }
  // Both calls happen even with nothing to ask: every rank makes the same calls whatever
  // its graph, so a rank that compiled another graph cannot leave the others waiting in
  // an exchange (the calibrator then measures nothing, on every rank).
  int measured_now = 0;
  MAGI_RETURN_IF_ERROR(Measure(compute, compute_keys, &measured_now));
  {
    // Each issue of a collective: the compute before it (since the previous one) and
    // between its start and its wait (what it overlaps), by the table just filled (agreed
    // across ranks, so every rank asks for the same).
    std::map<std::string, std::vector<CollectiveIssue>> issues;
    std::map<const Node*, double> compute_at_start;  // compute so far, when each start ran
    std::map<const Node*, size_t> issue_of_start;    // its index in issues[its key]
    double since = 0, so_far = 0;
    const Node* first_start = nullptr;
    for (const Node* node : graph.nodes()) {
      if (node->op() == kWaitOp) {
        const Node* start = StartOfWait(*node);
        auto it = compute_at_start.find(start);
        auto index = issue_of_start.find(start);
        if (it != compute_at_start.end() && index != issue_of_start.end()) {
          issues[CalibrationTable::KeyOf(*start)][index->second].compute_during_seconds = so_far - it->second;
        }
        continue;
      }
      if (node->op() == kCallOp) continue;
      const std::string key = CalibrationTable::KeyOf(*node);
      if (IsCollectiveStart(node->op())) {
        std::vector<CollectiveIssue>& of_key = issues[key];
        issue_of_start[node] = of_key.size();
        of_key.push_back({/*compute_before_seconds=*/since, /*compute_during_seconds=*/0});
        compute_at_start[node] = so_far;
        if (first_start == nullptr) first_start = node;
        since = 0;
      } else {
        const double seconds = table_->Find(key).value_or(0.0);
        since += seconds;
        so_far += seconds;
      }
    }
    // A step runs in a loop: its first collective follows the previous run's compute after
    // its last one (the optimizer) too. (The pipeline's first bucketed all-gather took
    // 2.4 ms in the tiny step's runs against 1.1 measured right after the previous run.)
    if (first_start != nullptr) {
      issues[CalibrationTable::KeyOf(*first_start)][issue_of_start.at(first_start)].compute_before_seconds += since;
    }
    for (size_t i = 0; i < collectives.size(); ++i) collectives[i].issues = issues[collective_keys[i]];
    MAGI_RETURN_IF_ERROR(Measure(collectives, collective_keys, &measured_now));
  }
  SaveCache(measured_now);
  return absl::OkStatus();
}

absl::Status AutoCalibration::CalibrateCalls(const Graph& graph,
                                             const std::map<std::string, std::shared_ptr<Executable>>& callees) {
  std::vector<KernelRequest> requests;
  std::vector<std::string> keys, cache_keys;
  std::set<std::string> seen;
  for (const Node* node : graph.nodes()) {
    if (node->op() != kCallOp) continue;
    auto callee = callees.find(CalleeName(*node));
    if (callee == callees.end() || callee->second == nullptr) continue;
    std::string key = CalibrationTable::KeyOf(*node);
    if (table_->Find(key) || unmeasurable_.count(key) || !seen.insert(key).second) continue;
    const Executable& executable = *callee->second;
    std::string cache_key = absl::StrCat(key, " on ", executable.backend_name());
    if (std::string code = executable.code_key(); !code.empty()) absl::StrAppend(&cache_key, " code ", code);
    KernelRequest request;
    request.node = node;
    request.callee = callee->second;
    // Only the micro-run cache, under the code key: the steps' file records calls by
    // structure alone, whichever backend or settings compiled them.
    const CalibrationCache& source =
        pinned_ && pinned_->table().Find(cache_key) ? *pinned_ : cache_;
    if (&source != &cache_) known_from_pinned_.insert(cache_key);
    request.known = source.table().Find(cache_key);
    request.known_working_bytes = source.table().FindWorkingBytes(cache_key);
    requests.push_back(std::move(request));
    keys.push_back(std::move(key));
    cache_keys.push_back(std::move(cache_key));
  }
  // Called on every rank whatever its graph (see Calibrate).
  int measured_now = 0;
  MAGI_RETURN_IF_ERROR(Measure(requests, keys, &measured_now, cache_keys));
  SaveCache(measured_now);
  return absl::OkStatus();
}

void AutoCalibration::SaveCache(int measured_now) {
  stats_.planned_hash = CalibrationCache::HashOf(*table_);
  if (pinned_) {
    if (absl::Status saved = pinned_->Save(); !saved.ok()) {
      warnings_.push_back(absl::StrCat("warning: ", saved.message(), "; the times pinned now serve this compile only"));
    }
  }
  if (measured_now == 0) return;
  absl::Status saved = cache_.Save();
  if (!saved.ok()) {
    warnings_.push_back(absl::StrCat("warning: ", saved.message(), "; the ", measured_now,
                                     " times measured now serve this compile only"));
  }
}

absl::Status AutoCalibration::Measure(const std::vector<KernelRequest>& requests, const std::vector<std::string>& keys,
                                      int* measured_now, const std::vector<std::string>& cache_keys) {
  MAGI_CHECK(cache_keys.empty() || cache_keys.size() == keys.size());
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<KernelTime>> times = calibrator_->Calibrate(requests);
  stats_.measure_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!times.ok()) {
    return absl::Status(times.status().code(), absl::StrCat("calibration: ", times.status().message()));
  }
  if (times->size() != requests.size()) {
    return absl::InternalError(absl::StrCat("calibration: the calibrator returned ", times->size(), " times for ",
                                            requests.size(), " kernels"));
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    const KernelTime& time = (*times)[i];
    ++stats_.kernels;
    if (!time.seconds) {
      ++stats_.unmeasured;
      unmeasurable_.insert(keys[i]);  // not tried again after the pipeline (the same on every rank)
      continue;
    }
    // The agreed time, not this machine's cached one (they may differ across hosts).
    const int64_t working_bytes = time.working_bytes.value_or(-1);
    table_->Set(keys[i], *time.seconds, std::max<int64_t>(1, time.runs), working_bytes);
    const std::string& cache_key = cache_keys.empty() ? keys[i] : cache_keys[i];
    if (pinned_ && !pinned_->table().Find(cache_key)) {
      pinned_->Set(cache_key, *time.seconds, std::max<int64_t>(1, time.runs), working_bytes);
    }
    if (time.measured) {
      ++stats_.measured;
      ++*measured_now;
      cache_.Set(cache_key, *time.seconds, std::max<int64_t>(1, time.runs), working_bytes);
    } else if (known_from_pinned_.count(cache_key)) {
      ++stats_.from_pinned;
    } else if (known_from_steps_.count(keys[i])) {
      ++stats_.from_steps;
    } else {
      ++stats_.from_cache;
    }
  }
  return absl::OkStatus();
}

std::string AutoCalibration::Summary() const {
  std::string text = absl::StrFormat("calibration (%s): %d kernels, ", cache_.device_key(), stats_.kernels);
  if (pinned_) absl::StrAppendFormat(&text, "%d pinned in %s, ", stats_.from_pinned, pinned_->path());
  if (stats_.from_steps > 0) {
    absl::StrAppendFormat(&text, "%d from earlier steps in %s, ", stats_.from_steps, steps_cache_.path());
  }
  absl::StrAppendFormat(&text, "%d cached in %s, %d measured in %.1f s", stats_.from_cache, cache_.path(),
                        stats_.measured, stats_.measure_seconds);
  if (stats_.unmeasured > 0) {
    absl::StrAppend(&text, ", ", stats_.unmeasured, " not measurable (timed by the formula)");
  }
  // Which versions of the files the times came from, and the times planned with: two runs
  // whose hashes agree planned with the same table.
  absl::StrAppend(&text, "; read");
  const char* separator = " ";
  for (const CalibrationCache* cache : {pinned_ ? &*pinned_ : nullptr, &cache_, &steps_cache_}) {
    if (cache == nullptr || !cache->loaded()) continue;
    absl::StrAppend(&text, separator, cache->path(), " (table ", cache->hash(), ")");
    separator = ", ";
  }
  if (*separator == ' ') absl::StrAppend(&text, " no cached table");
  absl::StrAppend(&text, "; planned with table ", stats_.planned_hash);
  return text;
}

}  // namespace magi
