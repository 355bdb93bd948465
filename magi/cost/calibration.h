// Measured op and collective times that override the analytical model.
//
// A runtime run with per-node timing (RunStats::node_seconds) is folded into a table
// keyed by what determines a kernel's time: the op, its constant arguments and its
// operand and result types ("aten::mm(f32[8,64], f32[64,64]) -> f32[8,64]"). For a
// collective the key is its start's (kind, group size, input types) and the time is
// start + wait of a run where nothing overlapped the two (the unscheduled graph).
//
// The file is CSV, one entry per line: `mean_seconds,count,key`, written atomically.
#ifndef MAGI_COST_CALIBRATION_H_
#define MAGI_COST_CALIBRATION_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/ir/graph.h"

namespace magi {

class CalibrationTable {
 public:
  // The key under which `node`'s time is recorded.
  static std::string KeyOf(const Node& node);

  // Adds one run's times: `node_seconds[i]` belongs to graph.nodes()[i]. A wait's time
  // is added to its start's entry. InvalidArgument if the sizes differ.
  absl::Status AddRun(const Graph& graph, const std::vector<double>& node_seconds);
  void Add(const std::string& key, double seconds, int64_t count = 1);

  std::optional<double> Lookup(const Node& node) const;
  size_t size() const { return entries_.size(); }

  std::string ToCsv() const;
  static absl::StatusOr<CalibrationTable> FromCsv(absl::string_view text, absl::string_view source = "calibration");
  absl::Status Save(const std::string& path) const;
  static absl::StatusOr<CalibrationTable> Load(const std::string& path);

 private:
  struct Entry {
    double total_seconds = 0;
    int64_t count = 0;
  };
  std::map<std::string, Entry> entries_;
};

}  // namespace magi

#endif  // MAGI_COST_CALIBRATION_H_
