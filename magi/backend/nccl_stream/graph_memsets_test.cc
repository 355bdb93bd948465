#include "magi/backend/nccl_stream/graph_memsets.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace magi::cuda {
namespace {

#define ASSERT_CUDA(call)                                                           \
  do {                                                                              \
    const cudaError_t error_ = (call);                                              \
    ASSERT_EQ(error_, cudaSuccess) << #call << ": " << cudaGetErrorString(error_); \
  } while (0)

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

// A node's dependencies and dependents, each sorted (default edges only, as built here).
using Neighbours = std::pair<std::vector<cudaGraphNode_t>, std::vector<cudaGraphNode_t>>;
Neighbours NeighboursOf(cudaGraphNode_t node) {
  Neighbours result;
  size_t count = 0;
  cudaGraphNodeGetDependencies(node, nullptr, nullptr, &count);
  result.first.resize(count);
  if (count > 0) cudaGraphNodeGetDependencies(node, result.first.data(), nullptr, &count);
  count = 0;
  cudaGraphNodeGetDependentNodes(node, nullptr, nullptr, &count);
  result.second.resize(count);
  if (count > 0) cudaGraphNodeGetDependentNodes(node, result.second.data(), nullptr, &count);
  std::sort(result.first.begin(), result.first.end());
  std::sort(result.second.begin(), result.second.end());
  return result;
}

std::vector<cudaGraphNode_t> NodesOf(cudaGraph_t graph) {
  size_t count = 0;
  cudaGraphGetNodes(graph, nullptr, &count);
  std::vector<cudaGraphNode_t> nodes(count);
  if (count > 0) cudaGraphGetNodes(graph, nodes.data(), &count);
  return nodes;
}

// The shapes multi-stream capture makes: a memset that is a root, one with two dependencies
// and two dependents, one that is a leaf. Each kernel node that replaces a memset has exactly
// its edges, and the bytes each copy reads show the order held.
TEST_F(GraphMemsetsTest, KernelNodesKeepTheEdgesOfRootsJoinsForksAndLeaves) {
  constexpr size_t kBytes = 256;
  uint8_t *buffer = nullptr, *pattern = nullptr, *out1 = nullptr, *out2 = nullptr, *out3 = nullptr;
  for (uint8_t** allocation : {&buffer, &pattern, &out1, &out2, &out3}) {
    void* memory = nullptr;
    ASSERT_CUDA(cudaMalloc(&memory, kBytes));
    *allocation = static_cast<uint8_t*>(memory);
  }
  std::vector<uint8_t> host_pattern(kBytes);
  for (size_t i = 0; i < kBytes; ++i) host_pattern[i] = static_cast<uint8_t>(i * 13 + 1);
  ASSERT_CUDA(cudaMemcpy(pattern, host_pattern.data(), kBytes, cudaMemcpyHostToDevice));

  for (bool rewrite : {false, true}) {
    for (uint8_t* p : {buffer, out1, out2, out3}) ASSERT_CUDA(cudaMemset(p, 0xFF, kBytes));
    cudaGraph_t graph = nullptr;
    ASSERT_CUDA(cudaGraphCreate(&graph, 0));
    auto memset = [&](cudaGraphNode_t* node, std::vector<cudaGraphNode_t> deps, void* dst, unsigned value,
                      size_t bytes) {
      cudaMemsetParams params = {};
      params.dst = dst;
      params.value = value;
      params.elementSize = 1;
      params.width = bytes;
      params.height = 1;
      return cudaGraphAddMemsetNode(node, graph, deps.data(), deps.size(), &params);
    };
    auto copy = [&](cudaGraphNode_t* node, std::vector<cudaGraphNode_t> deps, void* dst, const void* src,
                    size_t bytes) {
      return cudaGraphAddMemcpyNode1D(node, graph, deps.data(), deps.size(), dst, src, bytes,
                                      cudaMemcpyDeviceToDevice);
    };
    cudaGraphNode_t m0, a, b, m1, c, d, m2;
    ASSERT_CUDA(memset(&m0, {}, buffer, 0x00, 64));          // root
    ASSERT_CUDA(copy(&a, {m0}, out1, buffer, 64));           // reads the zeros
    ASSERT_CUDA(copy(&b, {m0}, buffer + 64, pattern, 64));
    ASSERT_CUDA(memset(&m1, {a, b}, buffer, 0x77, 32));      // a join and a fork: after a read the zeros
    ASSERT_CUDA(copy(&c, {m1}, out2, buffer, 128));
    ASSERT_CUDA(copy(&d, {m1}, out3, buffer + 64, 64));
    ASSERT_CUDA(memset(&m2, {d}, out3, 0x55, 16));           // a leaf, after d wrote there
    std::vector<Neighbours> expected_edges = {NeighboursOf(m0), NeighboursOf(m1), NeighboursOf(m2)};
    std::sort(expected_edges.begin(), expected_edges.end());
    const std::vector<cudaGraphNode_t> before = NodesOf(graph);
    if (rewrite) {
      MemsetRewrite result;
      ASSERT_CUDA(RewriteSmallMemsetsAsKernels(graph, /*max_bytes=*/64, &result));
      EXPECT_EQ(result.rewritten, 3);
      EXPECT_EQ(result.kept, 0);
      std::vector<Neighbours> edges;
      for (cudaGraphNode_t node : NodesOf(graph)) {
        cudaGraphNodeType type;
        ASSERT_CUDA(cudaGraphNodeGetType(node, &type));
        EXPECT_NE(type, cudaGraphNodeTypeMemset);
        if (type == cudaGraphNodeTypeKernel) edges.push_back(NeighboursOf(node));
      }
      std::sort(edges.begin(), edges.end());
      EXPECT_EQ(edges, expected_edges);
      EXPECT_EQ(NodesOf(graph).size(), before.size());
    }
    cudaGraphExec_t exec = nullptr;
    ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    ASSERT_CUDA(cudaGraphLaunch(exec, stream_));
    ASSERT_CUDA(cudaStreamSynchronize(stream_));
    std::vector<uint8_t> got1(64), got2(128), got3(64);
    ASSERT_CUDA(cudaMemcpy(got1.data(), out1, 64, cudaMemcpyDeviceToHost));
    ASSERT_CUDA(cudaMemcpy(got2.data(), out2, 128, cudaMemcpyDeviceToHost));
    ASSERT_CUDA(cudaMemcpy(got3.data(), out3, 64, cudaMemcpyDeviceToHost));
    EXPECT_EQ(got1, std::vector<uint8_t>(64, 0x00)) << "rewrite=" << rewrite;
    std::vector<uint8_t> want2(128, 0x00);
    std::fill(want2.begin(), want2.begin() + 32, 0x77);
    std::copy(host_pattern.begin(), host_pattern.begin() + 64, want2.begin() + 64);
    EXPECT_EQ(got2, want2) << "rewrite=" << rewrite;
    std::vector<uint8_t> want3(host_pattern.begin(), host_pattern.begin() + 64);
    std::fill(want3.begin(), want3.begin() + 16, 0x55);
    EXPECT_EQ(got3, want3) << "rewrite=" << rewrite;
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  for (uint8_t* p : {buffer, pattern, out1, out2, out3}) cudaFree(p);
}

TEST_F(GraphMemsetsTest, GraphsWithoutMemsetsAreLeftAsTheyAre) {
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA(cudaGraphCreate(&graph, 0));
  MemsetRewrite result;
  ASSERT_CUDA(RewriteSmallMemsetsAsKernels(graph, 64, &result));  // empty
  EXPECT_EQ(result.rewritten, 0);
  EXPECT_EQ(result.kept, 0);
  void* memory = nullptr;
  ASSERT_CUDA(cudaMalloc(&memory, 128));
  char* bytes = static_cast<char*>(memory);
  cudaGraphNode_t first, second;
  ASSERT_CUDA(cudaGraphAddMemcpyNode1D(&first, graph, nullptr, 0, bytes, bytes + 64, 64, cudaMemcpyDeviceToDevice));
  ASSERT_CUDA(cudaGraphAddMemcpyNode1D(&second, graph, &first, 1, bytes + 64, bytes, 64, cudaMemcpyDeviceToDevice));
  ASSERT_CUDA(RewriteSmallMemsetsAsKernels(graph, 64, &result));  // copies only
  EXPECT_EQ(result.rewritten, 0);
  EXPECT_EQ(result.kept, 0);
  EXPECT_EQ(NodesOf(graph).size(), 2u);
  EXPECT_EQ(NeighboursOf(second).first, std::vector<cudaGraphNode_t>{first});
  cudaGraphDestroy(graph);
  cudaFree(memory);
}

}  // namespace
}  // namespace magi::cuda
