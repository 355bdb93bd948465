// Cross-rank agreement of a calibration: every rank compiles the same graph, measures the
// same list in the same order and returns the same times, so that every rank's tables,
// and hence its plans, are identical.
//
//   RankExchange exchange(options.communicators, options.device);
//   MAGI_ASSIGN_OR_RETURN(bool same, exchange.SameRequestsEverywhere(requests));
//   MAGI_ASSIGN_OR_RETURN(std::vector<bool> measure, exchange.AgreeOnMissing(known));
//   ... measure ...
//   return exchange.AgreeOnTimes(measure, timings, known, known_working_bytes);
//
// Each exchange is one all-gather of doubles over each communicator of more than one rank
// in turn (by group name: HSDP's two groups reach every rank), so every rank must make the
// same exchanges in the same order. With no such communicator (one process) an exchange
// returns this rank's values alone.
#ifndef MAGI_CALIBRATION_RANK_AGREEMENT_H_
#define MAGI_CALIBRATION_RANK_AGREEMENT_H_

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/backend/kernel_calibrator.h"
#include "magi/calibration/kernel_timing.h"
#include "magi/comm/communicator.h"

namespace magi::calibration {

class RankExchange {
 public:
  // The communicators of the step's groups, by name (null ones and groups of one rank take
  // no part); exchanged tensors live on `device` (NCCL gathers device tensors).
  RankExchange(const std::map<std::string, std::shared_ptr<Communicator>>& communicators, const at::Device& device);

  // Every rank's `mine`, in one order all ranks share (gathered over each communicator in
  // turn). One process: just `mine`.
  absl::StatusOr<std::vector<std::vector<double>>> Exchange(const std::vector<double>& mine) const;

  // Whether every rank asks for the same kernels: one fixed-size exchange of the count and
  // a fingerprint of the keys. Else every later exchange would pair collectives of
  // different sizes (Gloo aborts the process on that). A collective's issues are part of
  // it: how many there are and which have compute around them decide its exchanges
  // (MeasureCollective's probe and run counts).
  absl::StatusOr<bool> SameRequestsEverywhere(const std::vector<KernelRequest>& requests) const;

  // Entry i is to be measured when any rank lacks known[i] (one exchange).
  absl::StatusOr<std::vector<bool>> AgreeOnMissing(const std::vector<std::optional<double>>& known) const;

  // Every rank takes the mean over the ranks (in rank order) of what each measured now
  // (`timings`, where `measure`) or knew: the same times everywhere (one exchange). Equal
  // values stay bit for bit (a cached table re-read gives the same plan). Working bytes
  // (partition calls) agree as the largest any rank measured or knew.
  absl::StatusOr<std::vector<KernelTime>> AgreeOnTimes(const std::vector<bool>& measure,
                                                       const std::vector<std::optional<Timing>>& timings,
                                                       const std::vector<std::optional<double>>& known,
                                                       const std::vector<std::optional<int64_t>>& known_working_bytes) const;

 private:
  std::vector<std::shared_ptr<Communicator>> exchange_;  // by group name (the map's order)
  at::Device device_;
};

// Every rank's `value`, exchanged over `communicator` only (in its rank order), through a
// tensor on `device`.
absl::StatusOr<std::vector<double>> GatherOver(Communicator& communicator, double value, const at::Device& device);

}  // namespace magi::calibration

#endif  // MAGI_CALIBRATION_RANK_AGREEMENT_H_
