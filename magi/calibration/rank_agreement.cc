#include "magi/calibration/rank_agreement.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "magi/base/fnv1a.h"
#include "magi/base/status_macros.h"
#include "magi/cost/calibration.h"

namespace magi::calibration {

RankExchange::RankExchange(const std::map<std::string, std::shared_ptr<Communicator>>& communicators,
                           const at::Device& device)
    : device_(device) {
  for (const auto& [group, communicator] : communicators) {
    if (communicator != nullptr && communicator->size() > 1) exchange_.push_back(communicator);
  }
}

absl::StatusOr<std::vector<std::vector<double>>> RankExchange::Exchange(const std::vector<double>& mine) const {
  const int64_t n = static_cast<int64_t>(mine.size());
  at::Tensor gathered = at::tensor(at::ArrayRef<double>(mine), at::TensorOptions().dtype(at::kDouble)).to(device_);
  for (const std::shared_ptr<Communicator>& communicator : exchange_) {
    MAGI_ASSIGN_OR_RETURN(auto handle, communicator->Start(CollectiveKind::kAllGather, {gathered}, "sum"));
    MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> results, handle->Wait());
    gathered = results.at(0);
  }
  at::Tensor host = gathered.to(at::kCPU).contiguous();
  const double* data = host.data_ptr<double>();
  std::vector<std::vector<double>> ranks(n == 0 ? 1 : host.numel() / n);
  for (size_t r = 0; r < ranks.size(); ++r) ranks[r].assign(data + r * n, data + (r + 1) * n);
  return ranks;
}

absl::StatusOr<bool> RankExchange::SameRequestsEverywhere(const std::vector<KernelRequest>& requests) const {
  std::string keys;
  for (const KernelRequest& request : requests) {
    absl::StrAppend(&keys, CalibrationTable::KeyOf(*request.node), " issues=", request.issues.size(), ":");
    for (const CollectiveIssue& issue : request.issues) {
      absl::StrAppend(&keys, issue.compute_before_seconds > 0 ? "b" : "-", issue.compute_during_seconds > 0 ? "d" : "-");
    }
    absl::StrAppend(&keys, "\n");
  }
  const uint64_t fingerprint = Fnv1a64(keys);
  MAGI_ASSIGN_OR_RETURN(std::vector<std::vector<double>> headers,
                        Exchange({static_cast<double>(requests.size()), static_cast<double>(fingerprint >> 32),
                                  static_cast<double>(fingerprint & 0xffffffffull)}));
  for (const std::vector<double>& header : headers) {
    if (header != headers.front()) return false;
  }
  return true;
}

absl::StatusOr<std::vector<bool>> RankExchange::AgreeOnMissing(const std::vector<std::optional<double>>& known) const {
  std::vector<double> missing(known.size());
  for (size_t i = 0; i < known.size(); ++i) missing[i] = known[i] ? 0.0 : 1.0;
  MAGI_ASSIGN_OR_RETURN(std::vector<std::vector<double>> all, Exchange(missing));
  std::vector<bool> measure(known.size(), false);
  for (size_t i = 0; i < known.size(); ++i) {
    for (const std::vector<double>& rank : all) measure[i] = measure[i] || rank[i] != 0.0;
  }
  return measure;
}

absl::StatusOr<std::vector<KernelTime>> RankExchange::AgreeOnTimes(
    const std::vector<bool>& measure, const std::vector<std::optional<Timing>>& timings,
    const std::vector<std::optional<double>>& known, const std::vector<std::optional<int64_t>>& known_working_bytes) const {
  const size_t n = measure.size();
  std::vector<double> mine(3 * n);
  for (size_t i = 0; i < n; ++i) {
    mine[i] = measure[i] ? (timings[i] ? timings[i]->seconds : -1.0) : *known[i];
    mine[n + i] = measure[i] && timings[i] ? timings[i]->runs : 0.0;
    // Exact in a double below 2^53 bytes.
    mine[2 * n + i] = static_cast<double>(
        measure[i] ? (timings[i] ? timings[i]->working_bytes : -1) : known_working_bytes[i].value_or(-1));
  }
  MAGI_ASSIGN_OR_RETURN(std::vector<std::vector<double>> all, Exchange(mine));
  std::vector<KernelTime> times(n);
  for (size_t i = 0; i < n; ++i) {
    double sum = 0, first = -1, total_runs = 0, working_bytes = -1;
    int count = 0;
    bool equal = true;
    for (const std::vector<double>& rank : all) {
      if (rank[i] < 0) continue;  // that rank could not run it
      if (count == 0) first = rank[i];
      equal = equal && rank[i] == first;
      sum += rank[i];
      total_runs += rank[n + i];
      working_bytes = std::max(working_bytes, rank[2 * n + i]);
      ++count;
    }
    if (working_bytes >= 0) times[i].working_bytes = static_cast<int64_t>(working_bytes);
    times[i].measured = measure[i];
    if (count == 0) continue;
    // Equal values stay bit for bit (a cached table re-read gives the same plan).
    times[i].seconds = equal ? first : sum / count;
    times[i].runs = static_cast<int64_t>(total_runs);
  }
  return times;
}

absl::StatusOr<std::vector<double>> GatherOver(Communicator& communicator, double value, const at::Device& device) {
  at::Tensor mine = at::full({1}, value, at::TensorOptions().dtype(at::kDouble)).to(device);
  MAGI_ASSIGN_OR_RETURN(auto handle, communicator.Start(CollectiveKind::kAllGather, {mine}, "sum"));
  MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> results, handle->Wait());
  at::Tensor host = results.at(0).to(at::kCPU).contiguous();
  return std::vector<double>(host.data_ptr<double>(), host.data_ptr<double>() + host.numel());
}

}  // namespace magi::calibration
