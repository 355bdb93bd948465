#include "magi/runtime/gloo/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "magi/compat/torch_status.h"
#include "magi/registry/registry.h"
#include "magi/runtime/gloo/collective_packing.h"

namespace magi {
namespace {

// Gloo's store interface over LibTorch's c10d::Store (what ProcessGroupGloo does too).
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  explicit StoreAdapter(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, std::vector<uint8_t>(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::vector<uint8_t> value = store_->get(key);
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    store_->wait(keys, timeout);
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

// What Gloo's error says happened. Gloo throws one exception type (IoException) for
// every transport failure, so its text is all there is: a timeout reads "Timed out
// waiting ...", a peer that died or exited reads "Connection closed by peer ..." or
// "Read error ...: Connection reset by peer" (within milliseconds of the death, long
// before any timeout).
enum class FailureCause { kTimeout, kPeerLost, kOther };

FailureCause ClassifyGlooError(absl::string_view what) {
  if (absl::StrContains(what, "Timed out")) return FailureCause::kTimeout;
  for (absl::string_view lost : {"Connection closed by peer", "Connection reset by peer", "Broken pipe",
                                 "Read error", "Write error", "Connection refused"}) {
    if (absl::StrContains(what, lost)) return FailureCause::kPeerLost;
  }
  return FailureCause::kOther;
}

// The failure of `collective` on this rank, the cause first: a lost connection is not
// blamed on the timeout.
absl::Status DescribeGlooFailure(int rank, absl::string_view collective, absl::string_view group,
                                 std::chrono::milliseconds timeout, absl::string_view what) {
  std::string prefix = absl::StrCat("rank ", rank, ": ", collective, " on group '", group, "' failed");
  switch (ClassifyGlooError(what)) {
    case FailureCause::kTimeout:
      return absl::DeadlineExceededError(absl::StrCat(prefix, " (timeout ", timeout.count(),
                                                      " ms; a peer rank may be dead or hung): ", what));
    case FailureCause::kPeerLost:
      return absl::UnavailableError(
          absl::StrCat(prefix, ": the connection to a peer rank was lost (the peer died or exited): ", what));
    case FailureCause::kOther:
      break;
  }
  return absl::UnavailableError(absl::StrCat(prefix, ": ", what));
}

template <typename T>
void AllreduceTyped(const std::shared_ptr<gloo::Context>& context, at::Tensor& tensor,
                    std::chrono::milliseconds timeout) {
  gloo::AllreduceOptions options(context);
  // The ring, named rather than left to Gloo's default choice: every element is reduced
  // in one fixed order for a given world size and buffer (a collective's packed tensors),
  // in every mode (and every rank ends with the same bits).
  options.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
  options.setOutput(tensor.data_ptr<T>(), static_cast<size_t>(tensor.numel()));
  options.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<T>));
  options.setTimeout(timeout);
  gloo::allreduce(options);
}

class Handle : public CollectiveHandle {
 public:
  // The worker writes `*timing` before it sets the future's value, so a Wait that
  // returned sees it.
  Handle(std::future<absl::StatusOr<std::vector<at::Tensor>>> future, std::shared_ptr<CollectiveTiming> timing)
      : future_(std::move(future)), timing_(std::move(timing)) {}
  absl::StatusOr<std::vector<at::Tensor>> Wait() override {
    if (!future_.valid()) return absl::FailedPreconditionError("a collective handle was waited on twice");
    absl::StatusOr<std::vector<at::Tensor>> results = future_.get();
    waited_ok_ = results.ok();
    return results;
  }
  std::optional<CollectiveTiming> timing() const override {
    if (!waited_ok_) return std::nullopt;
    return *timing_;
  }

 private:
  std::future<absl::StatusOr<std::vector<at::Tensor>>> future_;
  std::shared_ptr<CollectiveTiming> timing_;
  bool waited_ok_ = false;
};

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::Context> context, int rank, int size, std::string group,
                   std::chrono::milliseconds timeout)
      : context_(std::move(context)), rank_(rank), size_(size), group_(std::move(group)), timeout_(timeout) {
    worker_ = std::thread([this] { Loop(); });
  }
  ~GlooCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    ready_.notify_all();
    worker_.join();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::StatusOr<std::unique_ptr<CollectiveHandle>> Start(CollectiveKind kind, std::vector<at::Tensor> inputs,
                                                          const std::string& reduce_op) override {
    for (const at::Tensor& t : inputs) {
      if (!t.device().is_cpu()) return absl::InvalidArgumentError("the Gloo communicator takes CPU tensors");
    }
    auto timing = std::make_shared<CollectiveTiming>();
    const std::chrono::steady_clock::time_point issued = std::chrono::steady_clock::now();
    auto task = std::make_shared<std::packaged_task<absl::StatusOr<std::vector<at::Tensor>>()>>(
        [this, kind, inputs = std::move(inputs), reduce_op, timing, issued]() {
          // Worker thread: ready when issued and the previous collective is done.
          timing->ready = std::max(issued, previous_done_);
          absl::StatusOr<std::vector<at::Tensor>> results = Run(kind, inputs, reduce_op);
          timing->done = previous_done_ = std::chrono::steady_clock::now();
          return results;
        });
    auto future = task->get_future();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back([task] { (*task)(); });
    }
    ready_.notify_one();
    return std::unique_ptr<CollectiveHandle>(new Handle(std::move(future), std::move(timing)));
  }

 private:
  void Loop() {
    while (true) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  // One Gloo allgather for all inputs (collective_packing.h).
  absl::StatusOr<std::vector<at::Tensor>> AllGather(const std::vector<at::Tensor>& inputs) {
    std::vector<size_t> all(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      all[i] = i;
      if (inputs[i].dim() == 0) {
        return absl::InvalidArgumentError(absl::StrCat("input ", i, " is a scalar; all_gather concatenates along dim 0"));
      }
    }
    absl::StatusOr<at::Tensor> packed = PackChunked(inputs, all, /*chunks=*/1, at::kByte);
    if (!packed.ok()) return packed.status();
    at::Tensor gathered = at::empty({packed->numel() * size_}, packed->options());
    if (packed->numel() > 0) {
      gloo::AllgatherOptions options(context_);
      options.setInput(packed->data_ptr<uint8_t>(), static_cast<size_t>(packed->numel()));
      options.setOutput(gathered.data_ptr<uint8_t>(), static_cast<size_t>(gathered.numel()));
      options.setTimeout(timeout_);
      gloo::allgather(options);
    }
    return UnpackGathered(gathered, inputs, size_);
  }

  // One ring allreduce per dtype among the inputs. A reduce-scatter packs each input's
  // rank-r rows into chunk r and keeps this rank's chunk (an allreduce of the whole
  // buffer: Gloo's own reduce-scatter needs pre-registered buffers; exact at twice the
  // traffic, which CPU runs can afford).
  absl::StatusOr<std::vector<at::Tensor>> Reduce(CollectiveKind kind, const std::vector<at::Tensor>& inputs,
                                                 const std::string& reduce_op) {
    if (kind == CollectiveKind::kAllToAll) {
      return absl::UnimplementedError("all_to_all is not implemented for Gloo yet");
    }
    for (size_t i = 0; i < inputs.size(); ++i) {  // before any Gloo call: no group reduced, then a failure
      const at::ScalarType dtype = inputs[i].scalar_type();
      if (dtype != at::kFloat && dtype != at::kDouble && dtype != at::kInt && dtype != at::kLong) {
        return absl::UnimplementedError(absl::StrCat("input ", i, ": the Gloo communicator cannot reduce ",
                                                     c10::toString(dtype), " tensors (f32, f64, i32, i64)"));
      }
      if (reduce_op == "avg" && !at::isFloatingType(dtype)) {
        return absl::InvalidArgumentError(
            absl::StrCat("input ", i, " is ", c10::toString(dtype), "; avg reduces floating-point tensors only"));
      }
    }
    const int64_t chunks = kind == CollectiveKind::kReduceScatter ? size_ : 1;
    std::vector<at::Tensor> outputs(inputs.size());
    for (const std::vector<size_t>& members : GroupByDtype(inputs)) {
      const at::ScalarType dtype = inputs[members.front()].scalar_type();
      absl::StatusOr<at::Tensor> packed = PackChunked(inputs, members, chunks, dtype);
      if (!packed.ok()) return packed.status();
      if (packed->numel() > 0) {
        switch (dtype) {
          case at::kFloat:
            AllreduceTyped<float>(context_, *packed, timeout_);
            break;
          case at::kDouble:
            AllreduceTyped<double>(context_, *packed, timeout_);
            break;
          case at::kInt:
            AllreduceTyped<int32_t>(context_, *packed, timeout_);
            break;
          case at::kLong:
            AllreduceTyped<int64_t>(context_, *packed, timeout_);
            break;
          default:
            return absl::InternalError("unchecked dtype");  // refused above
        }
      }
      if (reduce_op == "avg") packed->div_(size_);
      std::vector<at::Tensor> results =
          UnpackChunk(*packed, inputs, members, chunks, kind == CollectiveKind::kReduceScatter ? rank_ : 0);
      for (size_t k = 0; k < members.size(); ++k) outputs[members[k]] = std::move(results[k]);
    }
    return outputs;
  }

  absl::StatusOr<std::vector<at::Tensor>> Run(CollectiveKind kind, const std::vector<at::Tensor>& inputs,
                                              const std::string& reduce_op) {
    std::string name(CollectiveStartOp(kind));
    if (!failure_.ok()) {
      return absl::Status(failure_.code(), absl::StrCat("rank ", rank_, ": ", name, " on group '", group_,
                                                        "' refused: an earlier collective failed (", failure_.message(),
                                                        ")"));
    }
    // Gloo throws (gloo::IoException on a timeout or a peer gone); such a failure leaves the
    // group unusable, so later collectives are refused (failure_).
    return compat::CallTorchWith(
        [&]() -> absl::StatusOr<std::vector<at::Tensor>> {
          absl::StatusOr<std::vector<at::Tensor>> outputs =
              kind == CollectiveKind::kAllGather ? AllGather(inputs) : Reduce(kind, inputs, reduce_op);
          if (!outputs.ok()) {
            return absl::Status(outputs.status().code(), absl::StrCat("rank ", rank_, ": ", name, " on group '",
                                                                      group_, "': ", outputs.status().message()));
          }
          return outputs;
        },
        [&](const compat::CaughtException& caught) {
          absl::Status status = DescribeGlooFailure(rank_, name, group_, timeout_, caught.message);
          failure_ = absl::Status(status.code(), caught.message);
          return status;
        });
  }

  std::shared_ptr<gloo::Context> context_;
  int rank_;
  int size_;
  std::string group_;
  std::chrono::milliseconds timeout_;
  absl::Status failure_;  // touched by the worker thread only
  std::chrono::steady_clock::time_point previous_done_;  // worker thread only
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<Communicator>> CreateGlooCommunicator(c10::intrusive_ptr<c10d::Store> store, int rank,
                                                                     int size, const std::string& group_name,
                                                                     std::chrono::milliseconds timeout) {
  auto connect = [&]() -> absl::StatusOr<std::shared_ptr<Communicator>> {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr && std::string(addr) != "127.0.0.1" &&
                                                        std::string(addr) != "localhost") {
      attr.hostname = "";  // bind the interface the hostname resolves to (multi-machine runs)
    }
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(timeout);
    StoreAdapter adapter(store);
    gloo::rendezvous::PrefixStore prefixed("magi/" + group_name, adapter);
    context->connectFullMesh(prefixed, device);
    return std::shared_ptr<Communicator>(new GlooCommunicator(context, rank, size, group_name, timeout));
  };
  return compat::CallTorch(absl::StatusCode::kUnavailable,
                           absl::StrCat("rank ", rank, ": connecting group '", group_name, "' with Gloo failed"),
                           connect);
}

}  // namespace magi

namespace magi {
namespace {

class GlooProvider : public CommunicatorProvider {
 public:
  absl::StatusOr<std::shared_ptr<Communicator>> Create(const CommunicatorOptions& options) const override {
    return CreateGlooCommunicator(options.store, options.rank, options.size, options.group_name, options.timeout);
  }
};

MAGI_REGISTER(CommunicatorProvider, "gloo",
              [](const ComponentOptions& options) -> absl::StatusOr<std::unique_ptr<CommunicatorProvider>> {
                if (!options.empty()) return absl::InvalidArgumentError("the gloo communicator takes no options");
                return std::make_unique<GlooProvider>();
              });

}  // namespace
}  // namespace magi
