#include "magi/backend/nccl_stream/graph_memsets.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace magi::cuda {
namespace {

#define ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call << ": " << cudaGetErrorString(cudaGetLastError())

class GraphMemsetsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no CUDA device";
    ASSERT_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // The types of the graph's nodes, counted.
  static std::vector<int> CountTypes(cudaGraph_t graph) {
    size_t count = 0;
    cudaGraphGetNodes(graph, nullptr, &count);
    std::vector<cudaGraphNode_t> nodes(count);
    cudaGraphGetNodes(graph, nodes.data(), &count);
    std::vector<int> types(3, 0);  // kernel, memset, memcpy
    for (cudaGraphNode_t node : nodes) {
      cudaGraphNodeType type;
      cudaGraphNodeGetType(node, &type);
      if (type == cudaGraphNodeTypeKernel) ++types[0];
      if (type == cudaGraphNodeTypeMemset) ++types[1];
      if (type == cudaGraphNodeTypeMemcpy) ++types[2];
    }
    return types;
  }

  cudaStream_t stream_ = nullptr;
};

// Memsets of 1-, 2- and 4-byte elements, 1D and 2D (pitched), in a chain with copies that
// read and write the same bytes: the rewritten graph writes what the memsets wrote, in the
// same order against the copies (a memset that ran before the copy in front of it, or
// after the copy behind it, would leave other bytes).
TEST_F(GraphMemsetsTest, RewrittenGraphWritesTheSameBytesInTheSameOrder) {
  constexpr size_t kBytes = 4096;
  uint8_t* buffer = nullptr;
  uint8_t* pattern = nullptr;
  uint8_t* snapshot = nullptr;
  for (uint8_t** allocation : {&buffer, &pattern, &snapshot}) {
    void* memory = nullptr;
    ASSERT_CUDA(cudaMalloc(&memory, kBytes));
    *allocation = static_cast<uint8_t*>(memory);
  }
  std::vector<uint8_t> host_pattern(kBytes);
  for (size_t i = 0; i < kBytes; ++i) host_pattern[i] = static_cast<uint8_t>(i * 7 + 3);
  ASSERT_CUDA(cudaMemcpy(pattern, host_pattern.data(), kBytes, cudaMemcpyHostToDevice));

  std::vector<std::vector<uint8_t>> results;
  for (bool rewrite : {false, true}) {
    cudaGraph_t graph = nullptr;
    ASSERT_CUDA(cudaGraphCreate(&graph, 0));
    cudaGraphNode_t last = nullptr;
    auto copy = [&](void* dst, const void* src, size_t bytes) {
      cudaGraphNode_t node;
      cudaError_t error =
          cudaGraphAddMemcpyNode1D(&node, graph, &last, last ? 1 : 0, dst, src, bytes, cudaMemcpyDeviceToDevice);
      last = node;
      return error;
    };
    auto memset = [&](void* dst, unsigned value, unsigned element_size, size_t width, size_t height, size_t pitch) {
      cudaMemsetParams params = {};
      params.dst = dst;
      params.value = value;
      params.elementSize = element_size;
      params.width = width;
      params.height = height;
      params.pitch = pitch;
      cudaGraphNode_t node;
      cudaError_t error = cudaGraphAddMemsetNode(&node, graph, &last, last ? 1 : 0, &params);
      last = node;
      return error;
    };
    ASSERT_CUDA(copy(buffer, pattern, kBytes));
    ASSERT_CUDA(memset(buffer + 4, 0, 4, 1, 1, 0));            // cuBLAS's kind: one 4-byte word
    ASSERT_CUDA(memset(buffer + 64, 0xAB, 1, 33, 1, 0));       // 33 bytes
    ASSERT_CUDA(memset(buffer + 256, 0xBEEF, 2, 10, 1, 0));    // 10 16-bit values
    ASSERT_CUDA(copy(snapshot, buffer, 512));                  // the buffer between the memsets
    ASSERT_CUDA(memset(buffer + 1024, 0x5A, 1, 16, 8, 64));    // 8 rows of 16 bytes, 64 apart
    ASSERT_CUDA(memset(buffer + 2048, 0x11111111, 4, 512, 1, 0));  // 2 KiB: over the bound below
    ASSERT_CUDA(copy(buffer + 3072, snapshot, 512));
    const std::vector<int> built = CountTypes(graph);
    EXPECT_EQ(built[1], 5);
    if (rewrite) {
      MemsetRewrite result;
      ASSERT_CUDA(RewriteSmallMemsetsAsKernels(graph, /*max_bytes=*/1024, &result));
      EXPECT_EQ(result.rewritten, 4);
      EXPECT_EQ(result.kept, 1);  // the 2 KiB one
      const std::vector<int> now = CountTypes(graph);
      EXPECT_EQ(now[0], built[0] + 4);
      EXPECT_EQ(now[1], 1);
      EXPECT_EQ(now[2], built[2]);
    }
    cudaGraphExec_t exec = nullptr;
    ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    ASSERT_CUDA(cudaMemset(buffer, 0xFF, kBytes));
    ASSERT_CUDA(cudaGraphLaunch(exec, stream_));
    ASSERT_CUDA(cudaStreamSynchronize(stream_));
    std::vector<uint8_t> out(kBytes);
    ASSERT_CUDA(cudaMemcpy(out.data(), buffer, kBytes, cudaMemcpyDeviceToHost));
    results.push_back(out);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  // The expected bytes, written on the host in program order.
  std::vector<uint8_t> expected = host_pattern;
  for (int i = 4; i < 8; ++i) expected[i] = 0;
  for (int i = 64; i < 97; ++i) expected[i] = 0xAB;
  for (int i = 0; i < 10; ++i) expected[256 + 2 * i] = 0xEF, expected[257 + 2 * i] = 0xBE;
  const std::vector<uint8_t> snapshot_bytes(expected.begin(), expected.begin() + 512);
  for (int row = 0; row < 8; ++row) {
    for (int i = 0; i < 16; ++i) expected[1024 + 64 * row + i] = 0x5A;
  }
  for (size_t i = 2048; i < kBytes; ++i) expected[i] = 0x11;
  for (size_t i = 0; i < 512; ++i) expected[3072 + i] = snapshot_bytes[i];
  EXPECT_EQ(results[0], expected);  // the graph as captured
  EXPECT_EQ(results[1], expected);  // rewritten
  cudaFree(buffer);
  cudaFree(pattern);
  cudaFree(snapshot);
}

TEST_F(GraphMemsetsTest, AGraphWithoutMemsetsIsLeftAsItIs) {
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA(cudaGraphCreate(&graph, 0));
  MemsetRewrite result;
  ASSERT_CUDA(RewriteSmallMemsetsAsKernels(graph, 64, &result));
  EXPECT_EQ(result.rewritten, 0);
  EXPECT_EQ(result.kept, 0);
  cudaGraphDestroy(graph);
}

}  // namespace
}  // namespace magi::cuda
