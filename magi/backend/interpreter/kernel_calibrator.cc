#include "magi/backend/interpreter/kernel_calibrator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/version.h>
#include <unistd.h>

#ifdef MAGI_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime.h>

#include "magi/backend/common/fused_adamw.h"
#include "magi/backend/common/fused_adamw_operands.h"
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "magi/analysis/cache_reuse.h"
#include "magi/analysis/memory_plan.h"
#include "magi/backend/common/step_plan.h"
#include "magi/backend/interpreter/interpreter.h"
#include "magi/backend/torch_executable.h"
#include "magi/base/fnv1a.h"
#include "magi/base/host_memory.h"
#include "magi/base/status_macros.h"
#include "magi/compat/torch_compat.h"
#include "magi/cost/calibration.h"
#include "magi/ir/collectives.h"
#include "magi/ir/magi_ops.h"

namespace magi {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::string CpuModel() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (absl::StartsWith(line, "model name")) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    }
  }
  return "unknown cpu";
}

// This core's own cache (L2): what a kernel finds there of what the step touched just
// before it (TorchKernelCalibratorOptions::cpu_cache_bytes).
int64_t CoreCacheBytes() {
  const long bytes = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return bytes > 0 ? bytes : 0;
}

// Where TouchCacheLines leaves what it read, so that the reads must happen (one per thread:
// ranks may be threads of one process).
thread_local volatile unsigned char touched_sink;

// Reads one byte of every cache line of `tensor`'s storage, which leaves it in this core's
// caches, as a step's operand written just before its consumer is (MeasureInOrderOnCpu).
void TouchCacheLines(const at::Tensor& tensor) {
  constexpr size_t kCacheLine = 64;
  if (!tensor.defined() || !tensor.has_storage() || !tensor.device().is_cpu()) return;
  const auto* bytes = static_cast<const volatile unsigned char*>(tensor.storage().data());
  if (bytes == nullptr) return;
  const size_t size = tensor.storage().nbytes();
  unsigned char sink = 0;
  for (size_t i = 0; i < size; i += kCacheLine) sink ^= bytes[i];
  touched_sink = sink;
}

double Mean(const std::vector<double>& values) {
  double sum = 0;
  for (double value : values) sum += value;
  return values.empty() ? 0 : sum / static_cast<double>(values.size());
}

// The smallest dimension of the node's floating tensors: integer inputs below it are
// valid indices into them (embedding rows, classes of a loss, gather positions).
int64_t IndexBound(const Node& node) {
  int64_t bound = std::numeric_limits<int64_t>::max();
  auto visit = [&](const Value* value) {
    if (!value->type().is_tensor() || !IsFloatingPoint(value->type().tensor().dtype)) return;
    for (int64_t size : value->type().tensor().sizes) {
      if (size > 0) bound = std::min(bound, size);
    }
  };
  for (const Value* operand : node.operands()) visit(operand);
  for (const Value* result : node.results()) visit(result);
  return bound == std::numeric_limits<int64_t>::max() ? 2 : bound;
}

// A tensor of `type` with values every op of the step accepts (see the header).
absl::StatusOr<at::Tensor> Synthesize(const TensorType& type, int64_t index_bound) {
  if (type.HasDynamicDims()) return absl::FailedPreconditionError(absl::StrCat(type.ToString(), " has dynamic sizes"));
  MAGI_ASSIGN_OR_RETURN(c10::ScalarType scalar_type, compat::ToScalarType(type.dtype));
  at::TensorOptions options = at::TensorOptions().dtype(scalar_type).device(compat::ToTorchDevice(type.device));
  std::vector<int64_t> strides = type.strides.empty() ? ContiguousStrides(type.sizes) : type.strides;
  // The storage the strides span (expanded dims, stride 0, share elements): filled flat,
  // then viewed with the IR's strides.
  int64_t storage = 1;
  for (size_t d = 0; d < type.sizes.size(); ++d) {
    if (type.sizes[d] == 0) storage = 0;
    if (storage > 0) storage += (type.sizes[d] - 1) * strides[d];
  }
  try {
    at::Tensor tensor = at::empty({storage}, options);
    if (scalar_type == at::kBool) {
      tensor.fill_(false);
    } else if (at::isFloatingType(scalar_type)) {
      tensor.uniform_(0.5, 1.0);
    } else if (at::isComplexType(scalar_type)) {
      tensor.fill_(0.75);
    } else if (index_bound >= 2) {
      tensor.random_(1, index_bound);
    } else {
      tensor.zero_();
    }
    return tensor.as_strided(type.sizes, strides);
  } catch (const c10::Error& error) {
    return absl::InternalError(absl::StrCat("cannot make a ", type.ToString(), ": ", error.what_without_backtrace()));
  }
}

// Puts the default random generators of the CPU and of `device` back as they were when it
// was made. Measuring runs kernels on synthesized inputs (uniform_, random_, rand, and the
// step's own random ops): without this a run that measured would draw other random numbers
// afterwards than one that found every kernel cached, and save another generator state in
// its checkpoint.
class RestoreGenerators {
 public:
  explicit RestoreGenerators(const at::Device& device) {
    generators_.push_back(at::detail::getDefaultCPUGenerator());
    if (!device.is_cpu()) generators_.push_back(at::globalContext().defaultGenerator(device));
    for (at::Generator& generator : generators_) {
      std::lock_guard<std::mutex> lock(generator.mutex());
      states_.push_back(generator.get_state());
    }
  }
  ~RestoreGenerators() {
    for (size_t i = 0; i < generators_.size(); ++i) {
      std::lock_guard<std::mutex> lock(generators_[i].mutex());
      generators_[i].set_state(states_[i]);
    }
  }
  RestoreGenerators(const RestoreGenerators&) = delete;
  RestoreGenerators& operator=(const RestoreGenerators&) = delete;

 private:
  std::vector<at::Generator> generators_;
  std::vector<at::Tensor> states_;
};

class TorchKernelCalibrator : public KernelCalibrator {
 public:
  explicit TorchKernelCalibrator(TorchKernelCalibratorOptions options)
      : options_(std::move(options)),
        cache_bytes_(options_.cpu_cache_bytes >= 0 ? options_.cpu_cache_bytes : CoreCacheBytes()) {
    for (const auto& [group, communicator] : options_.communicators) {
      if (communicator != nullptr && communicator->size() > 1) exchange_.push_back(communicator);
    }
  }

  std::string DeviceKey() const override { return TorchDeviceKey(options_.device); }

  absl::StatusOr<std::vector<KernelTime>> Calibrate(const std::vector<KernelRequest>& requests) override {
    RestoreGenerators restore(options_.device);
    return Measure(requests);
  }

 private:
  absl::StatusOr<std::vector<KernelTime>> Measure(const std::vector<KernelRequest>& requests) {
    plans_.clear();
    const size_t n = requests.size();
    // 0. The ranks must ask for the same kernels, else every later exchange would pair
    // collectives of different sizes (Gloo aborts the process on that). One fixed-size
    // exchange of the count and a fingerprint of the keys; on a mismatch (ranks compiled
    // different graphs: deterministic mode's plan check then names them) nothing is
    // measured, on any rank. A collective's issues are part of it: how many there are and
    // which have compute around them decide its exchanges (MeasureCollective's probe and
    // run counts).
    std::string keys;
    for (const KernelRequest& request : requests) {
      absl::StrAppend(&keys, CalibrationTable::KeyOf(*request.node), " issues=", request.issues.size(), ":");
      for (const CollectiveIssue& issue : request.issues) {
        absl::StrAppend(&keys, issue.compute_before_seconds > 0 ? "b" : "-",
                        issue.compute_during_seconds > 0 ? "d" : "-");
      }
      absl::StrAppend(&keys, "\n");
    }
    const uint64_t fingerprint = Fnv1a64(keys);
    MAGI_ASSIGN_OR_RETURN(std::vector<std::vector<double>> headers,
                          Exchange({static_cast<double>(n), static_cast<double>(fingerprint >> 32),
                                    static_cast<double>(fingerprint & 0xffffffffull)}));
    for (const std::vector<double>& header : headers) {
      if (header != headers.front()) {
        std::fprintf(stderr,
                     "magi: warning: the ranks asked to calibrate different kernels (their step graphs differ: another "
                     "model or pipeline on some rank?); nothing is measured\n");
        return std::vector<KernelTime>(n);
      }
    }
    if (n == 0) return std::vector<KernelTime>();
    std::vector<std::optional<double>> known(n);
    std::vector<std::optional<int64_t>> known_working_bytes(n);
    for (size_t i = 0; i < n; ++i) {
      known[i] = requests[i].known;
      known_working_bytes[i] = requests[i].known_working_bytes;
    }
    // 1. Which kernels any rank lacks: every rank measures those, in the same order.
    MAGI_ASSIGN_OR_RETURN(std::vector<bool> measure, AgreeOnMissing(known));
    // nccl_stream skips a collective over one rank (its results are its inputs): the cost
    // model's formula (launch overhead only) is what such a CUDA step pays. Left to it
    // (asked for, no time) before anything is announced, so that a compile from a cached
    // table announces no measurement.
    std::vector<bool> formula_only(n, false);
    int to_measure = 0, collectives = 0;
    for (size_t i = 0; i < n; ++i) {
      formula_only[i] = measure[i] && IsOneRankCollectiveOnCuda(*requests[i].node);
      to_measure += measure[i] && !formula_only[i];
      collectives += measure[i] && !formula_only[i] && IsCollectiveStart(requests[i].node->op());
    }

    // 2. Measure: compute kernels on each rank by itself, then the collectives in lockstep.
    std::vector<std::optional<Timing>> timings(n);
    if (to_measure > 0) {
      Progress(absl::StrFormat("magi: calibrating %d kernels of the step%s on %s...", to_measure,
                               collectives > 0 ? absl::StrFormat(" (%d collectives, in lockstep)", collectives) : "",
                               DeviceKey()),
               /*line=*/true);
      auto start = Clock::now();
      int done = 0, skipped_for_time = 0;
      // On CPU the compute kernels run in step order, one run of each per round
      // (MeasureInOrderOnCpu); partition calls and collectives one by one below.
      std::vector<bool> in_order(n, false);
      if (options_.device.is_cpu()) {
        std::vector<size_t> kernels;
        for (size_t i = 0; i < n; ++i) {
          if (measure[i] && !IsCollectiveStart(requests[i].node->op()) && requests[i].callee == nullptr) {
            kernels.push_back(i);
            in_order[i] = true;
          }
        }
        done += MeasureInOrderOnCpu(requests, kernels, start, timings, skipped_for_time);
      }
      // On CPU the kernels and collectives are then timed where they run: in a few runs
      // of their step (TimeKernelsInStepRuns); micro-runs below for the collectives of a
      // graph that cannot run so.
      if (options_.device.is_cpu() && options_.time_in_step_runs) {
        MAGI_ASSIGN_OR_RETURN(int timed, TimeKernelsInStepRuns(requests, measure, start, timings, in_order));
        done += timed;
      }
      for (int pass = 0; pass < 2; ++pass) {
        const bool collective_pass = pass == 1;
        for (size_t i = 0; i < n; ++i) {
          if (!measure[i] || formula_only[i] || in_order[i] ||
              IsCollectiveStart(requests[i].node->op()) != collective_pass) {
            continue;
          }
          if (!collective_pass && SecondsSince(start) > options_.max_seconds) {
            ++skipped_for_time;
            continue;
          }
          MAGI_ASSIGN_OR_RETURN(timings[i], Measure(requests[i]));
          ++done;
          if (isatty(2)) Progress(absl::StrFormat("\rmagi: calibrating... %d/%d", done, to_measure), false);
        }
      }
      // Those with a time: a kernel tried and found unmeasurable is listed below instead.
      int timed = 0;
      for (const std::optional<Timing>& timing : timings) timed += timing.has_value();
      std::string note = absl::StrFormat("%smagi: calibrated %d kernels in %.1f s", isatty(2) ? "\r" : "", timed,
                                         SecondsSince(start));
      if (timed < done) absl::StrAppendFormat(&note, "; %d could not be timed", done - timed);
      if (skipped_for_time > 0) {
        absl::StrAppendFormat(&note, "; %d left to the formula after the %.0f s limit", skipped_for_time,
                              options_.max_seconds);
      }
      Progress(note, true);
      if (!failures_.empty()) {
        std::string list;
        for (size_t f = 0; f < failures_.size() && f < 3; ++f) absl::StrAppend(&list, "\n  ", failures_[f]);
        if (failures_.size() > 3) absl::StrAppend(&list, "\n  ...");
        Progress(absl::StrCat("magi: ", failures_.size(),
                              " kernel(s) could not run by themselves (the formula times them):", list),
                 true);
        failures_.clear();
      }
    }
    plans_.clear();  // the graphs may not outlive this call
    // 3. Agree on the times.
    return AgreeOnTimes(measure, timings, known, known_working_bytes);
  }

 private:
  struct Timing {
    double seconds = 0;
    int runs = 0;
    int64_t working_bytes = -1;  // partition calls (KernelTime::working_bytes); -1: unknown
  };

  // Entry i is to be measured when any rank lacks known[i] (one exchange).
  absl::StatusOr<std::vector<bool>> AgreeOnMissing(const std::vector<std::optional<double>>& known) {
    std::vector<double> missing(known.size());
    for (size_t i = 0; i < known.size(); ++i) missing[i] = known[i] ? 0.0 : 1.0;
    MAGI_ASSIGN_OR_RETURN(std::vector<std::vector<double>> all, Exchange(missing));
    std::vector<bool> measure(known.size(), false);
    for (size_t i = 0; i < known.size(); ++i) {
      for (const std::vector<double>& rank : all) measure[i] = measure[i] || rank[i] != 0.0;
    }
    return measure;
  }

  // Every rank takes the mean over the ranks (in rank order) of what each measured now
  // (`timings`, where `measure`) or knew: the same times everywhere (one exchange).
  // Working bytes (partition calls) agree as the largest any rank measured or knew.
  absl::StatusOr<std::vector<KernelTime>> AgreeOnTimes(const std::vector<bool>& measure,
                                                       const std::vector<std::optional<Timing>>& timings,
                                                       const std::vector<std::optional<double>>& known,
                                                       const std::vector<std::optional<int64_t>>& known_working_bytes) {
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

  // Every rank's `value`, exchanged over `communicator` only (in its rank order).
  absl::StatusOr<std::vector<double>> GatherOver(Communicator& communicator, double value) {
    at::Tensor mine = at::full({1}, value, at::TensorOptions().dtype(at::kDouble)).to(options_.device);
    MAGI_ASSIGN_OR_RETURN(auto handle, communicator.Start(CollectiveKind::kAllGather, {mine}, "sum"));
    MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> results, handle->Wait());
    at::Tensor host = results.at(0).to(at::kCPU).contiguous();
    return std::vector<double>(host.data_ptr<double>(), host.data_ptr<double>() + host.numel());
  }

  void Progress(const std::string& text, bool line) const {
    if (!options_.progress) return;
    std::fprintf(stderr, "%s%s", text.c_str(), line ? "\n" : "");
    std::fflush(stderr);
  }

  // Every rank's `mine`, in one order all ranks share (gathered over each communicator
  // in turn). One process: just `mine`.
  absl::StatusOr<std::vector<std::vector<double>>> Exchange(const std::vector<double>& mine) {
    const int64_t n = static_cast<int64_t>(mine.size());
    at::Tensor gathered =
        at::tensor(at::ArrayRef<double>(mine), at::TensorOptions().dtype(at::kDouble)).to(options_.device);
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

  void Synchronize(const at::Device& device) const {
    if (device.is_cuda()) at::detail::getCUDAHooks().deviceSynchronize(device.index());
  }

  // The plan of the node's graph (built once per graph) and the node's entry in it.
  absl::StatusOr<const NodePlan*> PlanOf(const Node& node) {
    const Graph* graph = node.graph();
    auto it = plans_.find(graph);
    if (it == plans_.end()) {
      MAGI_ASSIGN_OR_RETURN(StepPlan plan, BuildStepPlan(*graph));
      Plans entry;
      entry.step = std::make_unique<StepPlan>(std::move(plan));
      for (size_t i = 0; i < entry.step->nodes.size(); ++i) entry.index[entry.step->nodes[i].node] = i;
      entry.cache = std::make_unique<OperandCacheModel>(*graph);
      it = plans_.emplace(graph, std::move(entry)).first;
    }
    auto index = it->second.index.find(&node);
    if (index == it->second.index.end()) return absl::InternalError(absl::StrCat(Where(node), ": not in its graph"));
    return &it->second.step->nodes[index->second];
  }

  // Times one kernel; nullopt (with the reason kept for the warning) when it cannot run
  // by itself. Fails only for a collective (its peers wait on it).
  absl::StatusOr<std::optional<Timing>> Measure(const KernelRequest& request) {
    const Node& node = *request.node;
    if (request.callee != nullptr) return MeasureCall(node, *request.callee);
    absl::StatusOr<const NodePlan*> found = PlanOf(node);
    if (!found.ok()) return Unmeasurable(node, found.status().message());
    const NodePlan& plan = **found;
    const StepPlan& step = *plans_.at(node.graph()).step;
    std::vector<at::Tensor> slots(step.num_slots);
    at::Device device(at::kCPU);
    // A failure here depends on the graph alone: every rank skips the same kernels.
    absl::StatusOr<std::vector<std::pair<int, at::Tensor>>> operands = SynthesizeOperands(node, step);
    if (!operands.ok()) return Unmeasurable(node, operands.status().message());
    for (auto& [slot, tensor] : *operands) {
      if (tensor.is_cuda()) device = tensor.device();
      slots[slot] = std::move(tensor);
    }
    switch (plan.kind) {
      case NodePlan::Kind::kCollectiveStart:
        return MeasureCollective(plan, slots, request.issues);
      case NodePlan::Kind::kOp:
      case NodePlan::Kind::kAdamW: {
        // magi::adamw on CUDA is timed as the multi-tensor kernel that nccl_stream, the
        // CUDA runtime, runs it with (one tensor per launch here); the interpreter's
        // op-by-op reference update is a check, not what a CUDA step pays.
        return MeasureRuns(node, device, [&]() -> absl::Status {
#ifdef MAGI_WITH_CUDA
          if (plan.kind == NodePlan::Kind::kAdamW && device.is_cuda()) return RunFusedAdamW(plan, slots);
#endif
          return RunOnce(plan, slots);
        });
      }
      case NodePlan::Kind::kWait:
      case NodePlan::Kind::kCall:
      case NodePlan::Kind::kLocalShard:  // this rank's slice of a gathered tensor: left to the formula
        break;
    }
    return Unmeasurable(node, "not a kernel", /*failed_to_run=*/false);
  }

  // A compiled partition (magi::call), run by itself on inputs of the call's types.
  absl::StatusOr<std::optional<Timing>> MeasureCall(const Node& node, Executable& callee) {
    auto* executable = dynamic_cast<TorchExecutable*>(&callee);
    if (executable == nullptr) {
      return Unmeasurable(node, absl::StrCat("backend '", callee.backend_name(), "' does not run LibTorch tensors"),
                          /*failed_to_run=*/false);
    }
    // Integer inputs may index any tensor inside the partition, not only its inputs and
    // outputs: below the smallest floating dimension of all of them.
    int64_t bound = IndexBound(node);
    const Module* module = node.graph() != nullptr ? node.graph()->module() : nullptr;
    if (const Graph* body = module != nullptr ? module->FindGraph(CalleeName(node)) : nullptr) {
      for (const Node* inner : body->nodes()) bound = std::min(bound, IndexBound(*inner));
    }
    std::vector<at::Tensor> inputs;
    // Where the partition runs: its results' device (a partition may take no tensor from
    // the device, e.g. one that makes its tensors with factory ops).
    at::Device device(at::kCPU);
    for (const Value* result : node.results()) {
      if (result->type().is_tensor() && result->type().tensor().device.type == DeviceType::kCuda) {
        device = compat::ToTorchDevice(result->type().tensor().device);
      }
    }
    for (const Value* operand : node.operands()) {
      if (!operand->type().is_tensor()) return Unmeasurable(node, absl::StrCat("%", operand->name(), " is not a tensor"));
      absl::StatusOr<at::Tensor> tensor = Synthesize(operand->type().tensor(), bound);
      if (!tensor.ok()) return Unmeasurable(node, tensor.status().message());
      if (tensor->is_cuda()) device = tensor->device();
      inputs.push_back(*std::move(tensor));
    }
    MAGI_ASSIGN_OR_RETURN(std::optional<Timing> timing,
                          MeasureRuns(node, device, [&]() -> absl::Status { return executable->Run(inputs).status(); }));
    if (timing) timing->working_bytes = MeasureWorkingBytes(device, *executable, inputs);
    return timing;
  }

  // The most memory one run of `callee` allocates beyond `inputs`, its results included:
  // on CUDA the caching allocator's peak over the run (all of the partition's buffers,
  // whichever code allocates them), else what the executable counts
  // (RunStats::peak_allocated_bytes). -1: unknown (an executable that does not count, a
  // failed run: the cost model then plans the callee's nodes).
  int64_t MeasureWorkingBytes(const at::Device& device, TorchExecutable& callee, const std::vector<at::Tensor>& inputs) {
    try {
#ifdef MAGI_WITH_CUDA
      if (device.is_cuda()) {
        Synchronize(device);
        c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
        const int64_t before = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0].current;
        if (!callee.Run(inputs).ok()) return -1;  // the results are freed here; their bytes are in the peak
        Synchronize(device);
        return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0].peak - before;
      }
#endif
      if (!callee.Run(inputs).ok()) return -1;
      return callee.last_run_stats().peak_allocated_bytes;
    } catch (const std::exception&) {  // c10::Error included: must not escape (the ranks' exchange follows)
      ClearDeviceError(device);
      return -1;
    }
  }

  // `failed_to_run`: the kernel itself could not run (or get inputs), not merely something
  // this calibrator does not time; a step run would fail on it (RunStep).
  std::optional<Timing> Unmeasurable(const Node& node, absl::string_view why, bool failed_to_run = true) {
    failures_.push_back(absl::StrCat(node.op(), ": ", why));
    if (failed_to_run && !IsCollectiveStart(node.op())) failed_keys_.insert(CalibrationTable::KeyOf(node));
    return std::nullopt;
  }

  // On CPU, the kernels and collectives among `requests` to measure, timed in runs of their
  // own step graph: the graph compiled by the interpreter with the step's communicators and
  // run on synthesized inputs (every rank the same graph, so the collectives pair up), its
  // node times profiled as a real step's are (the interpreter's RunStats::node_seconds,
  // which StepTimeFeedback folds into the steps' cache after real steps), after
  // options_.step_warmup_runs runs that are not counted. A key's time is its mean over its
  // nodes in the step (a collective: start plus wait; with a communicator that times its
  // collectives the wait holds nothing). Why: micro-runs of a Gloo collective after a
  // burst of matmuls came out 10-20% below what the same run's steps took (the tiny 2-rank
  // step, this 2-core machine, 2026-12-05; not the ranks' skew, not the interpreter's own
  // time), and step-order kernel micro-runs land between all-cold and all-warm caches
  // (+9% and -5% of the steps' compute) depending on the run; the step's own runs have
  // what the step pays by construction. The kernels were micro-run before (MeasureInOrderOnCpu):
  // a graph with a kernel that could not run, a partition call, a group without a
  // communicator, an input that cannot be synthesized or a peak above max_step_run_bytes
  // (on any rank: they agree) keeps its micro-run times, and its collectives are
  // micro-run. `in_order` marks the collectives timed here. Fails only if a run fails: the
  // ranks may then be mid-collective, and the error names the run. Returns how many
  // collectives it timed.
  absl::StatusOr<int> TimeKernelsInStepRuns(const std::vector<KernelRequest>& requests, const std::vector<bool>& measure,
                                            Clock::time_point calibration_start,
                                            std::vector<std::optional<Timing>>& timings, std::vector<bool>& in_order) {
    // The graphs with something to measure, in request order (the same on every rank).
    std::vector<const Graph*> graphs;
    for (size_t i = 0; i < requests.size(); ++i) {
      if (!measure[i] || requests[i].callee != nullptr) continue;
      const Graph* graph = requests[i].node->graph();
      if (std::find(graphs.begin(), graphs.end(), graph) == graphs.end()) graphs.push_back(graph);
    }
    int collectives = 0;
    for (const Graph* graph : graphs) {
      MAGI_ASSIGN_OR_RETURN(std::optional<CalibrationTable> runs, RunStep(*graph, calibration_start));
      if (!runs) continue;
      for (size_t i = 0; i < requests.size(); ++i) {
        if (!measure[i] || requests[i].callee != nullptr || requests[i].node->graph() != graph) continue;
        const bool collective = IsCollectiveStart(requests[i].node->op());
        if (collective && in_order[i]) continue;
        auto entry = runs->entries().find(CalibrationTable::KeyOf(*requests[i].node));
        if (entry == runs->entries().end()) continue;
        timings[i] = Timing{entry->second.mean_seconds, static_cast<int>(entry->second.count)};
        if (collective) {
          in_order[i] = true;
          ++collectives;
        }
      }
    }
    return collectives;
  }

  // `graph` run on synthesized inputs (TimeKernelsInStepRuns): options_.step_warmup_runs
  // runs, then as many as seconds_for_step_runs allows at the slowest rank's pace (between
  // min_step_runs and max_step_runs); each key's mean time over those and its number of
  // samples, as calibration from real steps records them (RunTimeAccumulator: a collective
  // is its start plus its wait). nullopt (said on stderr) when some rank cannot run it: every rank first says
  // whether it can (one exchange), so that they all run it or none does. Runs once per
  // graph structure for this calibrator's lifetime.
  absl::StatusOr<std::optional<CalibrationTable>> RunStep(const Graph& graph, Clock::time_point calibration_start) {
    std::string keys;
    for (const Node* node : graph.nodes()) absl::StrAppend(&keys, CalibrationTable::KeyOf(*node), "\n");
    const uint64_t fingerprint = Fnv1a64(keys);
    if (auto known = step_runs_.find(fingerprint); known != step_runs_.end()) return known->second;
    std::unique_ptr<Executable> compiled;
    std::vector<at::Tensor> inputs;
    const std::string why = PrepareStepRun(graph, calibration_start, compiled, inputs);
    MAGI_ASSIGN_OR_RETURN(std::vector<std::vector<double>> can, Exchange({why.empty() ? 1.0 : 0.0}));
    bool everyone = true;
    for (const std::vector<double>& rank : can) everyone = everyone && rank.at(0) == 1.0;
    if (!everyone) {
      Progress(absl::StrCat("magi: graph @", graph.name(), ": its kernels keep their micro-run times (",
                            why.empty() ? "another rank cannot run it" : why, ")"),
               /*line=*/true);
      step_runs_[fingerprint] = std::nullopt;
      return std::nullopt;
    }
    auto* executable = static_cast<TorchExecutable*>(compiled.get());
    executable->set_profile_nodes(true);
    // As the trainers run a step: donating its inputs (magi::adamw and in-place ops write
    // over them). The synthesized tensors are this calibrator's own.
    auto run_once = [&](int run) -> absl::Status {
      absl::StatusOr<std::vector<at::Tensor>> outputs;
      try {
        outputs = executable->RunDonating(inputs);
      } catch (const std::exception& error) {
        outputs = absl::InternalError(error.what());
      }
      if (!outputs.ok()) {
        return absl::Status(outputs.status().code(),
                            absl::StrCat("calibration: run ", run + 1, " of graph @", graph.name(),
                                         " on synthesized inputs (to time its kernels where the step runs them) "
                                         "failed: ",
                                         outputs.status().message()));
      }
      return absl::OkStatus();
    };
    const int warmup = std::max(1, options_.step_warmup_runs);
    Clock::time_point last_start = Clock::now();
    for (int run = 0; run < warmup; ++run) {
      last_start = Clock::now();
      MAGI_RETURN_IF_ERROR(run_once(run));
    }
    // A step's time moves by tens of percent from run to run on shared cores: as many runs
    // as the budget allows at the slowest rank's pace, the same count on every rank (their
    // collectives pair up).
    MAGI_ASSIGN_OR_RETURN(std::vector<std::vector<double>> paces, Exchange({SecondsSince(last_start)}));
    double pace = 1e-9;
    for (const std::vector<double>& rank : paces) pace = std::max(pace, rank.at(0));
    const int fewest = std::max(1, options_.min_step_runs);
    const int counted = static_cast<int>(std::clamp<double>(std::floor(options_.seconds_for_step_runs / pace), fewest,
                                                            std::max(fewest, options_.max_step_runs)));
    // Per key, as calibration from real steps records them (a collective: start + wait).
    RunTimeAccumulator accumulator(graph);
    for (int run = 0; run < counted; ++run) {
      MAGI_RETURN_IF_ERROR(run_once(warmup + run));
      MAGI_RETURN_IF_ERROR(accumulator.Add(executable->last_run_stats().node_seconds));
    }
    CalibrationTable times;
    accumulator.AddTo(times);
    step_runs_[fingerprint] = times;
    return times;
  }

  // The interpreter's executable of `graph` with the step's communicators bound, and its
  // synthesized inputs: the generator's own state for an rng.state input, integers below
  // every consumer's IndexBound (valid indices for all of them). "" when this rank can run
  // it, else why not.
  std::string PrepareStepRun(const Graph& graph, Clock::time_point calibration_start,
                             std::unique_ptr<Executable>& compiled, std::vector<at::Tensor>& inputs) {
    if (SecondsSince(calibration_start) > options_.max_seconds) return "past the calibration's time limit";
    if (graph.module() == nullptr || graph.nodes().empty()) return "no module or no nodes";
    for (const Node* node : graph.nodes()) {
      if (node->op() == kCallOp) return "it calls compiled partitions";
      if (failed_keys_.contains(CalibrationTable::KeyOf(*node))) {
        return absl::StrCat(node->op(), " cannot run on synthesized inputs");
      }
    }
    if (std::string why = ExceedsStepRunMemory(graph); !why.empty()) return why;
    absl::StatusOr<const NodePlan*> planned = PlanOf(*graph.nodes().front());
    if (!planned.ok()) return std::string(planned.status().message());
    const StepPlan& step = *plans_.at(&graph).step;
    for (const std::string& group : step.groups) {
      auto it = options_.communicators.find(group);
      if (it == options_.communicators.end() || it->second == nullptr) {
        return absl::StrCat("no communicator for group '", group, "'");
      }
    }
    InterpreterBackend backend;
    absl::StatusOr<std::unique_ptr<Executable>> made = backend.Compile(*graph.module(), graph);
    if (!made.ok()) return std::string(made.status().message());
    auto* executable = dynamic_cast<TorchExecutable*>(made->get());
    if (executable == nullptr) return "the interpreter did not make a TorchExecutable";
    for (const std::string& group : step.groups) {
      if (absl::Status bound = executable->BindCommunicator(group, options_.communicators.at(group)); !bound.ok()) {
        return std::string(bound.message());
      }
    }
    for (const Value* input : graph.inputs()) {
      if (!input->type().is_tensor()) return absl::StrCat("%", input->name(), " is not a tensor");
      if (input->role() == InputRole::kRng) {
        at::Generator generator = at::detail::getDefaultCPUGenerator();
        at::Tensor state;
        {
          std::lock_guard<std::mutex> lock(generator.mutex());
          state = generator.get_state();
        }
        absl::StatusOr<c10::ScalarType> dtype = compat::ToScalarType(input->type().tensor().dtype);
        if (!dtype.ok() || state.scalar_type() != *dtype || state.sizes().vec() != input->type().tensor().sizes) {
          return absl::StrCat("%", input->name(), " is not this generator's state");
        }
        inputs.push_back(state);
        continue;
      }
      int64_t bound = std::numeric_limits<int64_t>::max();
      for (const Use& use : input->uses()) bound = std::min(bound, IndexBound(*use.user));
      if (bound == std::numeric_limits<int64_t>::max()) bound = 2;
      absl::StatusOr<at::Tensor> tensor = Synthesize(input->type().tensor(), bound);
      if (!tensor.ok()) return std::string(tensor.status().message());
      inputs.push_back(*std::move(tensor));
    }
    compiled = *std::move(made);
    return "";
  }

  // A collective start over a group of one rank, calibrated for CUDA (Measure says why
  // nobody times it).
  bool IsOneRankCollectiveOnCuda(const Node& node) const {
    if (!options_.device.is_cuda() || !IsCollectiveStart(node.op())) return false;
    const Attribute* group = node.FindArg("group");
    if (group == nullptr || group->kind() != AttrKind::kString) return false;
    auto it = options_.communicators.find(group->as_string());
    return it != options_.communicators.end() && it->second != nullptr && it->second->size() == 1;
  }

  // Why a run of `graph` would hold more memory than options_.max_step_run_bytes allows
  // ("" if it would not, or if neither the limit nor the host's free memory is known).
  std::string ExceedsStepRunMemory(const Graph& graph) {
    absl::StatusOr<MemoryPlan> memory = PlanMemory(graph, /*assign_buffers=*/false);
    if (!memory.ok()) return absl::StrCat("its memory plan failed: ", memory.status().message());
    int64_t limit = options_.max_step_run_bytes;
    std::string what = "max_step_run_bytes";
    if (limit < 0) {
      std::optional<int64_t> available = AvailableHostMemoryBytes();
      if (!available) return "";  // nothing to compare with (neither /proc/meminfo nor a cgroup limit)
      int ranks = 1;
      for (const auto& [group, communicator] : options_.communicators) {
        if (communicator != nullptr) ranks = std::max(ranks, communicator->size());
      }
      limit = *available / 2 / ranks;
      what = absl::StrFormat("half of the %.1f MB available to this process over %d ranks", *available / 1e6, ranks);
    }
    if (memory->peak_bytes <= limit) return "";
    return absl::StrFormat("a run would hold %.1f MB at its peak, above %.1f MB (%s)", memory->peak_bytes / 1e6,
                           limit / 1e6, what);
  }

  // The CPU's compute kernels, timed as a step runs them: one run of each per round, in
  // the order the step first runs them (`kernels`), rounds repeated until each has
  // min_runs samples and the rounds took seconds_per_kernel per kernel (at most max_runs).
  // Timed back to back, a kernel runs with its inputs in cache and the intra-op pool's
  // threads still spinning from its previous run; in a step neither holds (on the 2-core
  // machine the tiny step's compute took 1.65x its back-to-back micro-runs, and 3x at two
  // intra-op threads: a reduction's parallel region wakes sleeping threads). Only the
  // kernels to measure take part: when most are cached, the few left run closer to back
  // to back than in the step. Before each timed run the operands the step finds in this
  // core's cache (magi/analysis/cache_reuse.h: written little traffic before the kernel)
  // are read into it; the others stay where the previous round left them. On the 2-core
  // machine (AMD EPYC, 1 MiB L2 a core) the tiny step's compute came out 9% above what its
  // steps measured with every operand left cold, 5% below with every one read in, and 2.5%
  // above with this (4 runs each, 2026-12-04).
  // Returns how many it prepared (timed or found unmeasurable). Past max_seconds of
  // `calibration_start` no kernel is prepared (those are counted in `skipped_for_time`) and
  // no round starts after the first: at most one warm-up and one timed run of each
  // prepared kernel lie beyond the limit.
  int MeasureInOrderOnCpu(const std::vector<KernelRequest>& requests, const std::vector<size_t>& kernels,
                          Clock::time_point calibration_start, std::vector<std::optional<Timing>>& timings,
                          int& skipped_for_time) {
    struct Prepared {
      size_t index;
      const NodePlan* plan;
      std::vector<std::pair<int, at::Tensor>> operands;  // (slot, synthesized tensor)
      std::vector<at::Tensor> in_cache;  // operands the step finds in cache (cache_reuse.h)
      std::vector<double> samples;
    };
    std::vector<Prepared> prepared;
    std::vector<at::Tensor> slots;  // shared: a kernel's operands are put in before its run, taken out after
    auto run = [&](const Prepared& p) {
      for (const auto& [slot, tensor] : p.operands) slots[slot] = tensor;
      absl::Status ran = GuardedRun(*p.plan, slots);
      for (const auto& operand : p.operands) slots[operand.first] = at::Tensor();
      return ran;
    };
    int reached = 0;
    for (size_t i : kernels) {
      if (SecondsSince(calibration_start) > options_.max_seconds) {
        ++skipped_for_time;
        continue;
      }
      ++reached;
      const Node& node = *requests[i].node;
      absl::StatusOr<const NodePlan*> found = PlanOf(node);
      if (!found.ok()) {
        Unmeasurable(node, found.status().message());
        continue;
      }
      const NodePlan& plan = **found;
      if (plan.kind != NodePlan::Kind::kOp && plan.kind != NodePlan::Kind::kAdamW) {
        Unmeasurable(node, "not a kernel", /*failed_to_run=*/false);
        continue;
      }
      const StepPlan& step = *plans_.at(node.graph()).step;
      if (slots.size() < static_cast<size_t>(step.num_slots)) slots.resize(step.num_slots);
      absl::StatusOr<std::vector<std::pair<int, at::Tensor>>> operands = SynthesizeOperands(node, step);
      if (!operands.ok()) {
        Unmeasurable(node, operands.status().message());
        continue;
      }
      Prepared p{i, &plan, *std::move(operands), {}, {}};
      const std::vector<bool> in_cache = plans_.at(node.graph()).cache->OperandsInCache(node, cache_bytes_);
      for (size_t k = 0; k < in_cache.size() && k < p.operands.size(); ++k) {
        if (in_cache[k]) p.in_cache.push_back(p.operands[k].second);
      }
      // A warm-up run (first-call allocations, lazy initialization) that also checks the op.
      if (absl::Status warm = run(p); !warm.ok()) {
        Unmeasurable(node, warm.message());
        continue;
      }
      prepared.push_back(std::move(p));
    }
    const auto start = Clock::now();
    const double budget = options_.seconds_per_kernel * static_cast<double>(prepared.size());
    for (int round = 0; round < options_.max_runs && !prepared.empty(); ++round) {
      if (round > 0 && SecondsSince(calibration_start) > options_.max_seconds) break;
      if (round >= options_.min_runs && SecondsSince(start) >= budget) break;
      for (size_t k = 0; k < prepared.size();) {
        Prepared& p = prepared[k];
        for (const at::Tensor& operand : p.in_cache) {
          TouchCacheLines(operand);
          if (options_.on_cache_read_for_testing) options_.on_cache_read_for_testing(*requests[p.index].node, operand);
        }
        const auto run_start = Clock::now();
        absl::Status ran = run(p);
        const double seconds = SecondsSince(run_start);
        if (!ran.ok()) {
          Unmeasurable(*requests[p.index].node, ran.message());
          prepared.erase(prepared.begin() + k);
          continue;
        }
        p.samples.push_back(seconds);
        ++k;
      }
      if (isatty(2)) {
        Progress(absl::StrFormat("\rmagi: calibrating... round %d over %d kernels in step order", round + 1,
                                 prepared.size()),
                 false);
      }
    }
    for (const Prepared& p : prepared) {
      timings[p.index] = Timing{Mean(p.samples), static_cast<int>(p.samples.size())};
    }
    return reached;
  }

  // The node's tensor operands synthesized (Synthesize, integers below IndexBound), each
  // with its slot in `step`.
  absl::StatusOr<std::vector<std::pair<int, at::Tensor>>> SynthesizeOperands(const Node& node, const StepPlan& step) {
    const int64_t bound = IndexBound(node);
    std::vector<std::pair<int, at::Tensor>> operands;
    for (const Value* operand : node.operands()) {
      if (!operand->type().is_tensor()) continue;
      MAGI_ASSIGN_OR_RETURN(at::Tensor tensor, Synthesize(operand->type().tensor(), bound));
      operands.emplace_back(step.slot_of.at(operand), std::move(tensor));
    }
    return operands;
  }

  // RunOnce with LibTorch's exceptions turned into a status.
  absl::Status GuardedRun(const NodePlan& plan, const std::vector<at::Tensor>& slots) {
    try {
      return RunOnce(plan, slots);
    } catch (const c10::Error& error) {
      return absl::InternalError(error.what_without_backtrace());
    } catch (const std::exception& error) {
      return absl::InternalError(error.what());
    }
  }

  // One run of a compute node, checked against the IR as the interpreter checks it.
  absl::Status RunOnce(const NodePlan& plan, const std::vector<at::Tensor>& slots) {
    std::vector<at::Tensor> results;
    if (plan.kind == NodePlan::Kind::kAdamW) {
      std::vector<at::Tensor> o;
      for (int s : plan.args[0].slots) o.push_back(slots[s]);
      try {
        results = AdamWReferenceOf(plan.adamw_split, o, plan.adamw, plan.adamw_in_place);
      } catch (const c10::Error& error) {
        return absl::InternalError(error.what_without_backtrace());
      }
    } else {
      MAGI_ASSIGN_OR_RETURN(results, CallOperator(plan, slots, stack_));
      stack_.clear();
    }
    return CheckResults(plan, results, /*allow_stride_check=*/false);
  }

  // Times `run` (one run of `node`'s kernels, checked): the mean of a few runs.
  // A LibTorch error thrown by the kernels or by a synchronization (an executable that
  // does not turn every c10::Error into a status, a device-side assert) makes the node
  // unmeasurable on this rank; it must not escape, or the other ranks would wait for this
  // one in the exchange of the times.
  absl::StatusOr<std::optional<Timing>> MeasureRuns(const Node& node, const at::Device& device,
                                                    const std::function<absl::Status()>& run) {
    try {
      return MeasureRunsUnguarded(node, device, run);
    } catch (const c10::Error& error) {
      ClearDeviceError(device);
      return Unmeasurable(node, error.what_without_backtrace());
    } catch (const std::exception& error) {
      ClearDeviceError(device);
      return Unmeasurable(node, error.what());
    }
  }

  static void ClearDeviceError(const at::Device& device) {
#ifdef MAGI_WITH_CUDA
    if (device.is_cuda()) cudaGetLastError();
#endif
  }

  absl::StatusOr<std::optional<Timing>> MeasureRunsUnguarded(const Node& node, const at::Device& device,
                                                             const std::function<absl::Status()>& run) {
#ifdef MAGI_WITH_CUDA
    if (device.is_cuda()) return MeasureOnCuda(node, device, run);
#endif
    // A warm-up run (first-call allocations, lazy initialization) that also checks the op.
    if (absl::Status warm = run(); !warm.ok()) return Unmeasurable(node, warm.message());
    std::vector<double> samples;
    auto budget_start = Clock::now();
    while (static_cast<int>(samples.size()) < options_.max_runs &&
           (static_cast<int>(samples.size()) < options_.min_runs ||
            SecondsSince(budget_start) < options_.seconds_per_kernel)) {
      Synchronize(device);
      auto start = Clock::now();
      if (absl::Status ran = run(); !ran.ok()) return Unmeasurable(node, ran.message());
      Synchronize(device);
      samples.push_back(SecondsSince(start));
    }
    return Timing{Mean(samples), static_cast<int>(samples.size())};
  }

#ifdef MAGI_WITH_CUDA
  // On CUDA a kernel's time is its time on the device as a step issued ahead of it runs
  // it (back to back, as in nccl_stream's CUDA graph): each sample first queues a spin
  // kernel (at::cuda::sleep) long enough for the host to queue the start event, the op's
  // kernels and the end event behind it, so the events time the kernels, not the host's
  // dispatch and launch latency (timing from synchronization to synchronization counted
  // ~10 us of that per op, more than many of a step's kernels take).
  absl::StatusOr<std::optional<Timing>> MeasureOnCuda(const Node& node, const at::Device& device,
                                                      const std::function<absl::Status()>& run) {
    // Warm-up (first-call allocations, lazy initialization, the check of the op); then
    // one more run says how long the host takes to queue a warm one.
    if (absl::Status warm = run(); !warm.ok()) return Unmeasurable(node, warm.message());
    Synchronize(device);
    auto host_start = Clock::now();
    if (absl::Status warm = run(); !warm.ok()) return Unmeasurable(node, warm.message());
    const double host_seconds = SecondsSince(host_start);
    Synchronize(device);
    // The spin covers the host's queueing several times over: at least 100 us at 2 GHz,
    // at most ~2 ms (an op whose host side takes longer is timed with gaps, as it runs).
    const int64_t spin_cycles = std::clamp<int64_t>(static_cast<int64_t>(host_seconds * 4e9), 200000, 4000000);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream(device.index()).stream();
    cudaEvent_t begin = nullptr, end = nullptr;
    if (cudaEventCreate(&begin) != cudaSuccess || cudaEventCreate(&end) != cudaSuccess) {
      if (begin != nullptr) cudaEventDestroy(begin);
      cudaGetLastError();
      return Unmeasurable(node, "cannot create CUDA events");
    }
    auto cuda_check = [](cudaError_t error, absl::string_view what) {
      return error == cudaSuccess ? absl::OkStatus()
                                  : absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
    };
    std::vector<double> samples;
    absl::Status failed;
    auto budget_start = Clock::now();
    try {
      while (static_cast<int>(samples.size()) < options_.max_runs &&
             (static_cast<int>(samples.size()) < options_.min_runs ||
              SecondsSince(budget_start) < options_.seconds_per_kernel)) {
        at::cuda::sleep(spin_cycles);
        if (failed = cuda_check(cudaEventRecord(begin, stream), "cudaEventRecord"); !failed.ok()) break;
        if (failed = run(); !failed.ok()) break;
        if (failed = cuda_check(cudaEventRecord(end, stream), "cudaEventRecord"); !failed.ok()) break;
        if (failed = cuda_check(cudaEventSynchronize(end), "cudaEventSynchronize"); !failed.ok()) break;
        float ms = 0;
        if (failed = cuda_check(cudaEventElapsedTime(&ms, begin, end), "cudaEventElapsedTime"); !failed.ok()) break;
        samples.push_back(static_cast<double>(ms) * 1e-3);
      }
    } catch (const c10::Error& error) {
      failed = absl::InternalError(error.what_without_backtrace());
    }
    cudaEventDestroy(begin);
    cudaEventDestroy(end);
    if (!failed.ok()) {
      cudaGetLastError();  // the failure is this kernel's: later launches must not see it
      return Unmeasurable(node, failed.message());
    }
    return Timing{Mean(samples), static_cast<int>(samples.size())};
  }

  // magi::adamw (either form) on the device as nccl_stream runs it: the multi-tensor
  // kernel, in place (the operands are this calibrator's own synthesized tensors).
  absl::Status RunFusedAdamW(const NodePlan& plan, const std::vector<at::Tensor>& slots) {
    std::vector<at::Tensor> o;
    for (int s : plan.args[0].slots) o.push_back(slots[s]);
    const bool split = plan.adamw_split;
    std::vector<at::Tensor> state;
    for (int k : AdamWStateOperands(*plan.node)) state.push_back(o[k]);
    for (int k = 0; k < static_cast<int>(o.size()); ++k) {
      if (!o[k].is_cuda() || o[k].scalar_type() != FusedAdamWOperandType(split, k, /*bf16_grad=*/false) ||
          !o[k].is_contiguous()) {
        return RunOnce(plan, slots);  // not what the fused kernel takes: the op-by-op update
      }
    }
    cuda::AdamWTensor tensor = FusedAdamWTensorOf(split, o, state);
    cudaError_t error = cuda::LaunchMultiTensorAdamW(&tensor, 1, FusedAdamWScalarsOf(split, o, plan.adamw),
                                                     at::cuda::getCurrentCUDAStream(o[0].get_device()).stream());
    if (error != cudaSuccess)
      return absl::InternalError(absl::StrCat("multi-tensor AdamW: ", cudaGetErrorString(error)));
    return absl::OkStatus();
  }
#endif

  // Each run: as much compute as the step runs before the collective (at most
  // options_.max_compute_before_seconds; the same work on every rank, a loop of small
  // matmuls), then the collective, timed from its start to the end of its wait. On CPU, a
  // collective the schedule overlaps with compute runs with as much compute (the same
  // bound) between its start and its wait, and is timed to when its results were there
  // (CollectiveHandle::timing; the wait's end where it blocked), as a profiled step times
  // it. A key issued at several places (`issues`) is timed at each in turn: the issues,
  // ordered by their compute, fall into at most kIssueGroups groups of adjacent ones, each
  // run takes the next group's mean compute, and the time is the groups' means weighted by
  // their sizes. Run 0 warms the transport up and is not counted.
  absl::StatusOr<std::optional<Timing>> MeasureCollective(const NodePlan& plan, const std::vector<at::Tensor>& slots,
                                                          std::vector<CollectiveIssue> issues) {
    auto it = options_.communicators.find(plan.group);
    // Same on every rank (the same communicators for the same graph): nobody measures it.
    if (it == options_.communicators.end() || it->second == nullptr) {
      return Unmeasurable(*plan.node, absl::StrCat("no communicator for group '", plan.group, "'"));
    }
    Communicator& communicator = *it->second;
    std::vector<at::Tensor> inputs;
    for (int s : plan.args[0].slots) inputs.push_back(slots[s]);
    if (issues.empty()) issues.emplace_back();
    for (CollectiveIssue& issue : issues) {
      issue.compute_before_seconds =
          std::min(std::max(0.0, issue.compute_before_seconds), options_.max_compute_before_seconds);
      // On CUDA the compute between a start and its wait runs on another stream than
      // NCCL's kernels: not what shares cores with the collective, and not replayed here.
      issue.compute_during_seconds =
          options_.device.is_cuda()
              ? 0.0
              : std::min(std::max(0.0, issue.compute_during_seconds), options_.max_compute_before_seconds);
    }
    std::sort(issues.begin(), issues.end(), [](const CollectiveIssue& a, const CollectiveIssue& b) {
      return std::make_pair(a.compute_before_seconds, a.compute_during_seconds) <
             std::make_pair(b.compute_before_seconds, b.compute_during_seconds);
    });
    struct Group {
      double before = 0, during = 0;  // the mean compute of its issues
      double weight = 0;              // how many issues it stands for
      int64_t iterations = 0, overlapped_iterations = 0;
      std::vector<double> samples;
    };
    constexpr size_t kIssueGroups = 6;
    const size_t group_count = std::min(issues.size(), kIssueGroups);
    std::vector<Group> groups(group_count);
    for (size_t i = 0; i < issues.size(); ++i) {
      Group& group = groups[i * group_count / issues.size()];
      group.before += issues[i].compute_before_seconds;
      group.during += issues[i].compute_during_seconds;
      group.weight += 1;
    }
    bool any_compute = false;
    for (Group& group : groups) {
      group.before /= group.weight;
      group.during /= group.weight;
      any_compute = any_compute || group.before > 0 || group.during > 0;
    }
    // A step's kind of compute: matmuls that allocate a fresh 256 KB result each.
    at::Tensor a = at::rand({256, 128}, at::TensorOptions().device(options_.device));
    at::Tensor b = at::rand({128, 256}, at::TensorOptions().device(options_.device));
    if (any_compute) {
      // The same work on every rank (their mean time per matmul), so the drift between
      // ranks is the real one.
      constexpr int kProbe = 8;
      for (int k = 0; k < 2; ++k) (void)at::mm(a, b);
      Synchronize(options_.device);
      auto probe_start = Clock::now();
      for (int k = 0; k < kProbe; ++k) (void)at::mm(a, b);
      Synchronize(options_.device);
      MAGI_ASSIGN_OR_RETURN(std::vector<double> probe, GatherOver(communicator, SecondsSince(probe_start) / kProbe));
      double per_iteration = 0;
      for (double p : probe) per_iteration += p / static_cast<double>(probe.size());
      auto iterations_for = [&](double seconds) -> int64_t {
        return seconds > 0 ? std::max<int64_t>(1, std::llround(seconds / std::max(per_iteration, 1e-9))) : 0;
      };
      for (Group& group : groups) {
        group.iterations = iterations_for(group.before);
        group.overlapped_iterations = iterations_for(group.during);
      }
    }
    // Every group gets a run (each must be in the mean).
    int runs = options_.collective_runs > 0 ? std::max<int>(options_.collective_runs, group_count) : 0;
    Clock::time_point timed_start = Clock::now();
    for (int run = 0; run <= runs; ++run) {
      if (run == 1) timed_start = Clock::now();
      Group& group = groups[run == 0 ? 0 : (run - 1) % groups.size()];
      for (int64_t k = 0; k < group.iterations; ++k) (void)at::mm(a, b);
      Synchronize(options_.device);
      auto start = Clock::now();
      absl::StatusOr<std::unique_ptr<CollectiveHandle>> handle = communicator.Start(plan.collective, inputs, plan.reduce_op);
      if (!handle.ok()) {
        return absl::Status(handle.status().code(), absl::StrCat(Where(*plan.node), ": ", handle.status().message()));
      }
      for (int64_t k = 0; k < group.overlapped_iterations; ++k) (void)at::mm(a, b);
      const Clock::time_point wait_called = Clock::now();
      absl::StatusOr<std::vector<at::Tensor>> results = (*handle)->Wait();
      if (!results.ok()) {
        return absl::Status(results.status().code(), absl::StrCat(Where(*plan.node), ": ", results.status().message()));
      }
      Synchronize(options_.device);
      double seconds = SecondsSince(start);
      if (group.overlapped_iterations > 0) {
        if (std::optional<CollectiveTiming> timing = (*handle)->timing(); timing && timing->done <= wait_called) {
          seconds = std::chrono::duration<double>(timing->done - start).count();  // done before the wait
        }
      }
      if (run > 0) group.samples.push_back(seconds);
      if (run == options_.collective_runs && run > 0 && options_.device.is_cpu() &&
          options_.max_collective_runs > options_.collective_runs) {
        // On shared CPU cores a run either takes the transport's time or stalls for a
        // scheduler slice (0.2-0.6 ms against 3-8 ms in the tiny step's all-gathers), so
        // a mean of 18 runs moved the step's prediction by +-20% between identical first
        // runs. More runs, as many as seconds_per_collective allows at the slowest rank's
        // pace: the same count on every rank (they run in lockstep).
        MAGI_ASSIGN_OR_RETURN(std::vector<double> paces,
                              GatherOver(communicator, SecondsSince(timed_start) / options_.collective_runs));
        double pace = 1e-9;
        for (double rank_pace : paces) pace = std::max(pace, rank_pace);
        const int fewest = std::max<int>(options_.collective_runs, group_count);
        runs = static_cast<int>(std::clamp<double>(std::floor(options_.seconds_per_collective / pace), fewest,
                                                   std::max(fewest, options_.max_collective_runs)));
      }
    }
    double seconds = 0, weight = 0;
    int timed = 0;
    for (const Group& group : groups) {
      if (group.samples.empty()) continue;
      seconds += group.weight * Mean(group.samples);
      weight += group.weight;
      timed += static_cast<int>(group.samples.size());
    }
    return Timing{weight > 0 ? seconds / weight : 0.0, timed};
  }

  struct Plans {
    std::unique_ptr<StepPlan> step;
    absl::flat_hash_map<const Node*, size_t> index;
    std::unique_ptr<OperandCacheModel> cache;  // which operands the step finds in cache
  };

  TorchKernelCalibratorOptions options_;
  int64_t cache_bytes_;  // options_.cpu_cache_bytes, resolved
  std::vector<std::shared_ptr<Communicator>> exchange_;  // by group name (the map's order)
  absl::flat_hash_map<const Graph*, Plans> plans_;
  torch::jit::Stack stack_;
  std::vector<std::string> failures_;
  // Keys of kernels that could not run (Unmeasurable), for this calibrator's lifetime: the
  // compile driver asks about a graph's kernels and its collectives in separate calls.
  absl::flat_hash_set<std::string> failed_keys_;
  // RunStep's results by the graph's fingerprint (its nodes' keys in order): the compute
  // call's runs serve the collectives call too.
  absl::flat_hash_map<uint64_t, std::optional<CalibrationTable>> step_runs_;
};

}  // namespace

std::string TorchDeviceKey(const at::Device& device) {
  if (device.is_cuda()) {
#ifdef MAGI_WITH_CUDA
    std::string name = at::cuda::getDeviceProperties(device.index() < 0 ? 0 : device.index())->name;
#else
    std::string name = "device";
#endif
    // "device-timed": CUDA events behind a spin kernel, magi::adamw as the multi-tensor
    // kernel (MeasureOnCuda); tables timed host-side before that are not reused.
    return absl::StrCat("cuda ", name, ", libtorch ", TORCH_VERSION, ", device-timed");
  }
  const int threads = at::get_num_threads();
  return absl::StrCat("cpu ", CpuModel(), ", ", threads, threads == 1 ? " thread" : " threads", ", libtorch ",
                      TORCH_VERSION);
}

std::shared_ptr<KernelCalibrator> MakeTorchKernelCalibrator(const TorchKernelCalibratorOptions& options) {
  return std::make_shared<TorchKernelCalibrator>(options);
}

}  // namespace magi
