// Measured op and collective times that override the analytical model.
//
// A runtime run with per-node timing (RunStats::node_seconds) is folded into a table
// keyed by what determines a kernel's time: the op, its constant arguments and its
// operand and result types ("aten::mm(f32[8,64], f32[64,64]) -> f32[8,64]"). For a
// collective the key is its start's (kind, group size, input types) and the time is
// start + wait, and a collective whose schedule runs compute between its start and its wait
// is keyed apart from one that runs alone ("[world=N, overlapped]"): on a few shared CPU cores
// such a collective and the compute beside it slow each other, so a time measured where it
// ran alone does not hold where it overlaps, nor the other way round. (Lookup takes the
// other one's time when a table has only that: better than the formula.)
// For a partition call (magi::call) it is the callee's StructuralHash and the call's
// types ("magi::call[partition 1f0c...](bf16[...], ...) -> ..."): identical partitions
// share one time, the compiled partition's run by itself.
//
// A partition call's entry also says how much memory the compiled partition allocates
// while it runs (beyond its inputs, its results included: CostModel::WorkingBytes).
//
// The file is CSV, one entry per line: `mean_seconds,count,key`, or
// `mean_seconds,count,working_bytes=N,key` for an entry with its memory (a reader of the
// three-field form takes "working_bytes=N,key" for a key no node has, and ignores it),
// written atomically; lines starting with '#' are comments. Means are printed with 17 significant digits, so
// a table read back is the table written, bit for bit (a cached table gives a later run
// the same plan as the run that measured it).
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
  struct Entry {
    double mean_seconds = 0;
    int64_t count = 0;          // samples the mean is of
    int64_t working_bytes = -1;  // partition calls: bytes allocated while it runs (-1: unknown)
  };

  // The key under which `node`'s time is recorded.
  static std::string KeyOf(const Node& node);
  // Whether a collective start has a node other than a view, a collective start or a wait
  // between it and its wait in its graph's order: compute the schedule overlaps it with.
  // Walks from the start to its wait (false for a start never waited for).
  static bool Overlapped(const Node& start);

  // Adds one run's times: `node_seconds[i]` belongs to graph.nodes()[i]. A wait's time
  // is added to its start's entry. InvalidArgument if the sizes differ.
  absl::Status AddRun(const Graph& graph, const std::vector<double>& node_seconds);
  // Folds `count` samples of mean `seconds` into `key`'s entry (the first sets it exactly).
  void Add(const std::string& key, double seconds, int64_t count = 1);
  // Replaces `key`'s entry: `seconds` is its mean from now on (and `working_bytes` its
  // memory, -1: unknown).
  void Set(const std::string& key, double seconds, int64_t count = 1, int64_t working_bytes = -1);

  std::optional<double> Lookup(const Node& node) const;
  std::optional<double> Find(const std::string& key) const;
  // The entry's working bytes, when it has them.
  std::optional<int64_t> FindWorkingBytes(const std::string& key) const;
  size_t size() const { return entries_.size(); }
  const std::map<std::string, Entry>& entries() const { return entries_; }

  // `comment`, when given, is written first, each of its lines prefixed with "# ".
  std::string ToCsv(absl::string_view comment = "") const;
  static absl::StatusOr<CalibrationTable> FromCsv(absl::string_view text, absl::string_view source = "calibration");
  absl::Status Save(const std::string& path, absl::string_view comment = "") const;
  static absl::StatusOr<CalibrationTable> Load(const std::string& path);

 private:
  // KeyOf with the collective's context given (Lookup tries both).
  static std::string KeyOf(const Node& node, bool overlapped);

  std::map<std::string, Entry> entries_;
};

// Many runs of one graph, summed node by node, for a CalibrationTable: what AddRun of each
// run would add, without building every node's key string each run (~1 us a node: 0.8 ms
// of the tiny CPU step's ~30 ms when every step was recorded so). The graph is read by the
// constructor only (keys and which nodes make one sample), not kept.
class RunTimeAccumulator {
 public:
  explicit RunTimeAccumulator(const Graph& graph);
  // Whether `graph` is (still) the graph this accumulates: the same object and node count.
  bool Accumulates(const Graph& graph) const { return &graph == graph_ && graph.nodes().size() == nodes_; }
  // One run's times: `node_seconds[i]` belongs to graph.nodes()[i] (InvalidArgument if the
  // sizes differ; then nothing is added).
  absl::Status Add(const std::vector<double>& node_seconds);
  // Adds the runs so far to `table`, as AddRun of each would have (per key: the same count
  // and mean, up to rounding).
  void AddTo(CalibrationTable& table) const;
  int64_t runs() const { return runs_; }

 private:
  struct Sample {
    std::string key;
    std::vector<size_t> nodes;  // one sample per run: these nodes' times summed (a start + its wait)
  };
  const void* graph_;  // identity only
  size_t nodes_;
  std::vector<Sample> samples_;
  std::vector<double> sums_;  // per sample, over the runs
  int64_t runs_ = 0;
};

}  // namespace magi

#endif  // MAGI_COST_CALIBRATION_H_
