// The NCCL communicator on one GPU (world 1: NCCL still runs its kernels on the comm stream).
// Needs a GPU: tags "cuda" and "gpu" (run on the GPU machine).
#include "magi/runtime/nccl/nccl_communicator.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/torch.h>

#include "gtest/gtest.h"
#include "magi/compat/deterministic.h"

namespace magi {
namespace {

std::shared_ptr<Communicator> WorldOfOne() {
  absl::StatusOr<std::shared_ptr<Communicator>> communicator = CreateNcclCommunicator(
      c10::make_intrusive<c10d::HashStore>(), /*rank=*/0, /*size=*/1, "dp", /*device_index=*/0,
      std::chrono::milliseconds(60000));
  EXPECT_TRUE(communicator.ok()) << communicator.status();
  return communicator.ok() ? *communicator : nullptr;
}

// With deterministic algorithms on, LibTorch fills every new tensor with NaN on the current
// stream. The outputs must be allocated (and filled) before the comm stream is ordered after
// the compute stream; allocated after, the fill raced the collective and left NaN in the
// results (seen on an H200 in deterministic training's final weights).
TEST(NcclCommunicatorTest, CollectiveResultsAreNotOverwrittenByTheAllocatorsFill) {
  std::shared_ptr<Communicator> communicator = WorldOfOne();
  ASSERT_NE(communicator, nullptr);
  compat::SetDeterministicAlgorithms(true);
  torch::manual_seed(0);
  for (int round = 0; round < 20; ++round) {
    std::vector<at::Tensor> inputs;
    for (int i = 0; i < 4; ++i) inputs.push_back(torch::randn({4096, 1024}, torch::kCUDA));
    for (CollectiveKind kind : {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter,
                                CollectiveKind::kAllReduce}) {
      absl::StatusOr<std::unique_ptr<CollectiveHandle>> handle = communicator->Start(kind, inputs, "sum");
      ASSERT_TRUE(handle.ok()) << handle.status();
      absl::StatusOr<std::vector<at::Tensor>> outputs = (*handle)->Wait();
      ASSERT_TRUE(outputs.ok()) << outputs.status();
      ASSERT_EQ(outputs->size(), inputs.size());
      for (size_t i = 0; i < inputs.size(); ++i) {
        EXPECT_TRUE(torch::equal((*outputs)[i], inputs[i])) << "round " << round << ", tensor " << i;
      }
    }
  }
  compat::SetDeterministicAlgorithms(false);
}

TEST(NcclCommunicatorTest, CpuTensorsAreRefused) {
  std::shared_ptr<Communicator> communicator = WorldOfOne();
  ASSERT_NE(communicator, nullptr);
  absl::StatusOr<std::unique_ptr<CollectiveHandle>> handle =
      communicator->Start(CollectiveKind::kAllGather, {torch::ones({4})}, "sum");
  ASSERT_FALSE(handle.ok());
  EXPECT_EQ(handle.status().message(), "the NCCL communicator takes CUDA tensors");
}

}  // namespace
}  // namespace magi
