// Runs a scheduled graph on modeled streams and predicts its step.
//
// The graph's node order is the schedule (what the runtime executes). Op nodes run
// back to back on the compute stream. A collective start is issued when the compute
// stream reaches it and runs on its communication stream (the node's `stream`
// annotation; by default 1 for all-gather, 2 for reduce-scatter, 3 for all-reduce and
// all-to-all); collectives of one process group share its links, so they run one at a
// time in issue order (as one NCCL communicator or one Gloo worker does). A wait stalls
// the compute stream until its collective has finished: that stall is exposed
// communication. Peak memory is the memory planner's, which counts a collective's
// result buffers from its start (the runtime allocates them there).
#ifndef MAGI_COST_SIMULATOR_H_
#define MAGI_COST_SIMULATOR_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "magi/cost/cost_model.h"
#include "magi/ir/graph.h"

namespace magi {

struct SimulatedEvent {
  std::string name;  // op name, or "all_gather [3 tensors, 1.2 MB]"
  int stream = 0;    // 0 = compute
  int node_index = 0;
  double start_s = 0;
  double end_s = 0;
};

struct SimulationResult {
  double step_seconds = 0;
  double compute_seconds = 0;                // busy time of the compute stream
  double communication_seconds = 0;          // busy time of all collectives
  double exposed_communication_seconds = 0;  // compute stalled in waits
  int64_t peak_bytes = 0;
  int peak_node = -1;  // program index of the node where the peak is reached (-1: the inputs; CompiledStep::prediction says when else)
  int num_collectives = 0;
  std::vector<SimulatedEvent> events;  // in start order

  double overlap_fraction() const {
    return communication_seconds > 0 ? 1.0 - exposed_communication_seconds / communication_seconds : 1.0;
  }
};

// Seconds per node, computed once for a graph that is simulated in many orders (a
// search): the cost of a compute node does not depend on where it runs. A collective
// start's may (a calibration table keys one that overlaps compute apart from one that runs
// alone: CalibrationTable::KeyOf), so starts are not cached.
class NodeTimes {
 public:
  // The model's time of `node`, from the cache when it has it.
  double Seconds(const Node& node, const CostModel& model);
  // Drops `node`'s entry (before the node is erased: a later node may get its address).
  void Forget(const Node* node) { seconds_.erase(node); }
  size_t size() const { return seconds_.size(); }

 private:
  absl::flat_hash_map<const Node*, double> seconds_;
};

struct SimulateOptions {
  enum class Events { kAll, kCommunication, kNone };
  // Which events to record: all (the timeline), collectives and stalled waits only (what
  // a search reads), or none.
  Events events = Events::kAll;
  // A cache of node times (not owned; may be null). Only valid while its nodes are
  // unchanged: rewrites that reuse a node's address for another node need a new one.
  NodeTimes* node_times = nullptr;
};

// FailedPrecondition for graphs the planner cannot size, or a wait before its start.
absl::StatusOr<SimulationResult> Simulate(const Graph& graph, const CostModel& model,
                                          const SimulateOptions& options = {});

// The timeline in Chrome trace JSON ("traceEvents", times in microseconds; opens in
// Perfetto and chrome://tracing): one track per stream.
std::string ChromeTraceJson(const SimulationResult& result, const std::string& process_name);

// The default stream of a collective kind (1 all-gather, 2 reduce-scatter, 3 others).
int DefaultStream(CollectiveKind kind);
// A stream's display name ("compute", "all-gather", ...).
std::string StreamName(int stream);

}  // namespace magi

#endif  // MAGI_COST_SIMULATOR_H_
