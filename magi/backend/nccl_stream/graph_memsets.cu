#include "magi/backend/nccl_stream/graph_memsets.h"

#include <cstdint>
#include <vector>

namespace magi::cuda {
namespace {

// cudaMemset2D's semantics: `height` rows of `width` elements of `element_size` (1, 2 or 4)
// bytes, rows `pitch` bytes apart, each element set to the low bytes of `value`.
__global__ void FillElements(char* dst, size_t pitch, unsigned value, unsigned element_size, size_t width,
                             size_t height) {
  const size_t count = width * height;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    char* row = dst + (i / width) * pitch;
    const size_t column = i % width;
    if (element_size == 4) {
      reinterpret_cast<uint32_t*>(row)[column] = value;
    } else if (element_size == 2) {
      reinterpret_cast<uint16_t*>(row)[column] = static_cast<uint16_t>(value);
    } else {
      reinterpret_cast<uint8_t*>(row)[column] = static_cast<uint8_t>(value);
    }
  }
}

// A node's incoming or outgoing edges, and whether all of them are default edges (full
// dependencies, not programmatic or port-specific ones, which a kernel node's edges would not
// reproduce: such a node is kept).
cudaError_t Edges(cudaGraphNode_t node, bool incoming, std::vector<cudaGraphNode_t>& nodes, bool& default_edges) {
  size_t count = 0;
  default_edges = true;
#if CUDART_VERSION >= 13000
  std::vector<cudaGraphEdgeData> edges;
  auto query = [&](cudaGraphNode_t* out, cudaGraphEdgeData* data) {
    return incoming ? cudaGraphNodeGetDependencies(node, out, data, &count)
                    : cudaGraphNodeGetDependentNodes(node, out, data, &count);
  };
  cudaError_t error = query(nullptr, nullptr);
  if (error == cudaErrorLossyQuery) {  // the count is set; the edges are read below
    cudaGetLastError();                  // not left for a later launch check to find
    error = cudaSuccess;
  }
  if (error != cudaSuccess || count == 0) {
    nodes.clear();
    return error;
  }
  nodes.resize(count);
  edges.resize(count);
  if ((error = query(nodes.data(), edges.data())) != cudaSuccess) return error;
  for (const cudaGraphEdgeData& edge : edges) {
    if (edge.type != cudaGraphDependencyTypeDefault || edge.from_port != 0 || edge.to_port != 0) default_edges = false;
  }
  return cudaSuccess;
#else
  // Before CUDA 13 these calls take no edge data (CUDA 12.3+ fail them where an edge is
  // not a default one: the rewrite then stops with that error and the node stays).
  auto query = [&](cudaGraphNode_t* out) {
    return incoming ? cudaGraphNodeGetDependencies(node, out, &count) : cudaGraphNodeGetDependentNodes(node, out, &count);
  };
  cudaError_t error = query(nullptr);
  nodes.resize(error == cudaSuccess ? count : 0);
  if (error != cudaSuccess || count == 0) return error;
  return query(nodes.data());
#endif
}

cudaError_t AddEdge(cudaGraph_t graph, cudaGraphNode_t from, cudaGraphNode_t to) {
#if CUDART_VERSION >= 13000
  return cudaGraphAddDependencies(graph, &from, &to, nullptr, 1);
#else
  return cudaGraphAddDependencies(graph, &from, &to, 1);
#endif
}

}  // namespace

cudaError_t RewriteSmallMemsetsAsKernels(cudaGraph_t graph, size_t max_bytes, MemsetRewrite* result) {
  *result = MemsetRewrite();
  size_t count = 0;
  cudaError_t error = cudaGraphGetNodes(graph, nullptr, &count);
  if (error != cudaSuccess || count == 0) return error;
  std::vector<cudaGraphNode_t> nodes(count);
  if ((error = cudaGraphGetNodes(graph, nodes.data(), &count)) != cudaSuccess) return error;
  std::vector<cudaGraphNode_t> before, after;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    if ((error = cudaGraphNodeGetType(node, &type)) != cudaSuccess) return error;
    if (type != cudaGraphNodeTypeMemset) continue;
    cudaMemsetParams memset;
    if ((error = cudaGraphMemsetNodeGetParams(node, &memset)) != cudaSuccess) return error;
    const size_t bytes = memset.elementSize * memset.width * memset.height;
    const bool known_size = memset.elementSize == 1 || memset.elementSize == 2 || memset.elementSize == 4;
    bool default_in = false, default_out = false;
    if ((error = Edges(node, /*incoming=*/true, before, default_in)) != cudaSuccess) return error;
    if ((error = Edges(node, /*incoming=*/false, after, default_out)) != cudaSuccess) return error;
    if (!known_size || bytes > max_bytes || !default_in || !default_out) {
      ++result->kept;
      continue;
    }
    char* dst = static_cast<char*>(memset.dst);
    size_t pitch = memset.height > 1 ? memset.pitch : memset.elementSize * memset.width;
    unsigned value = memset.value, element_size = memset.elementSize;
    size_t width = memset.width, height = memset.height;
    void* args[] = {&dst, &pitch, &value, &element_size, &width, &height};
    cudaKernelNodeParams kernel = {};
    kernel.func = reinterpret_cast<void*>(FillElements);
    kernel.gridDim = dim3(1);
    kernel.blockDim = dim3(128);  // a few bytes (cuBLAS writes 4): one block is fastest
    kernel.kernelParams = args;
    cudaGraphNode_t fill;
    if ((error = cudaGraphAddKernelNode(&fill, graph, before.data(), before.size(), &kernel)) != cudaSuccess) {
      return error;
    }
    for (cudaGraphNode_t next : after) {
      if ((error = AddEdge(graph, fill, next)) != cudaSuccess) {
        cudaGraphDestroyNode(fill);  // the memset node stays, with all its edges
        return error;
      }
    }
    if ((error = cudaGraphDestroyNode(node)) != cudaSuccess) {
      cudaGraphDestroyNode(fill);
      return error;
    }
    ++result->rewritten;
  }
  return cudaSuccess;
}

}  // namespace magi::cuda
