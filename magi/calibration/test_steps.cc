#include "magi/calibration/test_steps.h"

#include <thread>

#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "magi/ir/parser.h"

namespace magi::calibration {

const char kStep[] = R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @g {
    input %w: f32[250,64] {role = param}
    input %tokens: i64[32]
    input %targets: i64[32]
    input %lin: f32[64,64] {role = param}
    %e = aten::embedding(%w, %tokens, -1, false, false) : f32[32,64]
    %t = aten::t(%lin) : f32[64,64]strides[1,64]
    %h = aten::mm(%e, %t) : f32[32,64]
    %w2t = aten::t(%w) : f32[64,250]strides[1,64]
    %logits = aten::mm(%h, %w2t) : f32[32,250]
    %ls = aten::_log_softmax(%logits, 1, false) : f32[32,250]
    %loss, %total = aten::nll_loss_forward(%ls, %targets, none, 1, -100) : f32[], f32[]
    %f0, %f1 = magi::all_gather_start([%h, %e], group = "dp") : future<f32[64,64]>, future<f32[64,64]>
    %g0 = magi::wait(%f0) : f32[64,64]
    %g1 = magi::wait(%f1) : f32[64,64]
    %bad = aten::mm(%h, %h) : f32[32,32]
    output loss = %loss
    output g0 = %g0
    output bad = %bad
  }
}
)";

std::string RunnableStep() {
  std::string text = absl::StrReplaceAll(
      kStep, {{"    %bad = aten::mm(%h, %h) : f32[32,32]\n", ""},
              {"    output bad = %bad\n", ""},
              {"    %g0 = magi::wait(%f0) : f32[64,64]\n    %g1 = magi::wait(%f1) : f32[64,64]\n",
               "    %g0, %g1 = magi::wait(%f0, %f1) : f32[64,64], f32[64,64]\n"}});
  if (text.find("%bad") != std::string::npos || text.find("magi::wait(%f0, %f1)") == std::string::npos) {
    ADD_FAILURE() << "kStep changed: RunnableStep's edits no longer apply";
  }
  return text;
}

absl::StatusOr<std::vector<at::Tensor>> ThreadGroup::AllGather(int rank, const std::vector<at::Tensor>& inputs) {
  std::unique_lock<std::mutex> lock(mutex_);
  const int generation = generation_;
  deposited_[rank] = inputs;
  if (++arrived_ == 2) {
    result_.clear();
    for (size_t i = 0; i < inputs.size(); ++i) result_.push_back(at::cat({deposited_[0][i], deposited_[1][i]}));
    arrived_ = 0;
    ++generation_;
    ++collectives_;
    cv_.notify_all();
  } else {
    cv_.wait(lock, [&] { return generation_ != generation; });
  }
  return result_;
}

absl::StatusOr<std::unique_ptr<CollectiveHandle>> ThreadCommunicator::Start(CollectiveKind kind,
                                                                            std::vector<at::Tensor> inputs,
                                                                            const std::string&) {
  if (kind != CollectiveKind::kAllGather) return absl::UnimplementedError("all-gather only");
  return std::unique_ptr<CollectiveHandle>(std::make_unique<DoneHandle>(group_->AllGather(rank_, inputs)));
}

std::vector<KernelRequest> Kernels(const Graph& graph) {
  std::vector<KernelRequest> requests;
  for (const Node* node : graph.nodes()) {
    if (node->op() != "magi::wait") requests.push_back({node, std::nullopt});
  }
  return requests;
}

void OnTwoRanks(const std::function<void(int)>& rank) {
  std::thread r0(rank, 0), r1(rank, 1);
  r0.join();
  r1.join();
}

TorchKernelCalibratorOptions RankOptions(ThreadGroup& group, int rank) {
  TorchKernelCalibratorOptions options;
  options.communicators["dp"] = std::make_shared<ThreadCommunicator>(&group, rank);
  options.seconds_per_kernel = 0.0;
  return options;
}

size_t FirstGather(const std::vector<KernelRequest>& requests) {
  size_t gather = 0;
  while (requests.at(gather).node->op() != "magi::all_gather_start") ++gather;
  return gather;
}

absl::StatusOr<std::unique_ptr<Module>> PartitionCallStep(absl::string_view device) {
  return ParseModule(absl::StrReplaceAll(R"(module @m {
  graph @step.p.0 {
    input %x: f32[64,64]DEV
    input %ids: i64[8]DEV
    %e = aten::embedding(%x, %ids, -1, false, false) : f32[8,64]DEV
    %r = aten::relu(%e) : f32[8,64]DEV
    output r = %r
  }
  graph @step {
    input %a: f32[64,64]DEV
    input %i: i64[8]DEV
    %c = magi::call([%a, %i], callee = "step.p.0") : f32[8,64]DEV
    output c = %c
  }
}
)",
                                         {{"DEV", device}}));
}

}  // namespace magi::calibration
