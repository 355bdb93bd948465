#include "magi/compiler/auto_calibration.h"

#include <chrono>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "magi/base/check.h"
#include "magi/ir/collectives.h"
#include "magi/ir/magi_ops.h"

namespace magi {

AutoCalibration::AutoCalibration(std::shared_ptr<KernelCalibrator> calibrator, const std::string& cache_dir,
                                 CalibrationTable* table)
    : calibrator_(std::move(calibrator)),
      table_(table),
      cache_(CalibrationCache::Open(cache_dir.empty() ? CalibrationCache::DefaultDir() : cache_dir,
                                    calibrator_->DeviceKey())) {
  MAGI_CHECK(table_ != nullptr);
  if (!cache_.warning().empty()) warnings_.push_back(absl::StrCat("warning: calibration cache ", cache_.warning()));
}

absl::Status AutoCalibration::Calibrate(const Graph& graph) {
  // One representative per key the table lacks, in program order (the same on every rank).
  std::vector<const Node*> nodes;
  std::vector<std::string> keys;
  std::vector<std::optional<double>> known;
  std::set<std::string> seen;
  for (const Node* node : graph.nodes()) {
    if (node->op() == kWaitOp || node->op() == kCallOp) continue;
    std::string key = CalibrationTable::KeyOf(*node);
    if (table_->Find(key) || !seen.insert(key).second) continue;
    known.push_back(cache_.table().Find(key));
    nodes.push_back(node);
    keys.push_back(std::move(key));
  }
  if (nodes.empty()) return absl::OkStatus();
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<KernelTime>> times = calibrator_->Calibrate(nodes, known);
  stats_.measure_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!times.ok()) {
    return absl::Status(times.status().code(), absl::StrCat("calibration: ", times.status().message()));
  }
  if (times->size() != nodes.size()) {
    return absl::InternalError(absl::StrCat("calibration: the calibrator returned ", times->size(), " times for ",
                                            nodes.size(), " kernels"));
  }
  int measured_now = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const KernelTime& time = (*times)[i];
    ++stats_.kernels;
    if (!time.seconds) {
      ++stats_.unmeasured;
      continue;
    }
    // The agreed time, not this machine's cached one (they may differ across hosts).
    table_->Set(keys[i], *time.seconds, std::max<int64_t>(1, time.runs));
    if (time.measured) {
      ++stats_.measured;
      ++measured_now;
      cache_.Set(keys[i], *time.seconds, std::max<int64_t>(1, time.runs));
    } else {
      ++stats_.from_cache;
    }
  }
  if (measured_now > 0) {
    absl::Status saved = cache_.Save();
    if (!saved.ok()) {
      warnings_.push_back(absl::StrCat("warning: ", saved.message(), "; the ", measured_now,
                                       " times measured now serve this compile only"));
    }
  }
  return absl::OkStatus();
}

std::string AutoCalibration::Summary() const {
  std::string text = absl::StrFormat("calibration (%s): %d kernels, %d cached in %s, %d measured in %.1f s",
                                     cache_.device_key(), stats_.kernels, stats_.from_cache, cache_.path(),
                                     stats_.measured, stats_.measure_seconds);
  if (stats_.unmeasured > 0) {
    absl::StrAppend(&text, ", ", stats_.unmeasured, " not measurable (timed by the formula)");
  }
  return text;
}

}  // namespace magi
