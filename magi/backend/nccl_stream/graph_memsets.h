// Small memset nodes of a captured CUDA graph rewritten as kernel nodes. Plain CUDA: no
// LibTorch.
//
// Why: cuBLAS zeroes a 4-byte tile counter in its workspace before each GEMM that uses its
// dynamic tile scheduler (cudaMemsetAsync), so a captured training step has one memset node
// in front of almost every GEMM (307 in the 953M Llama step). On an H200
// (benchmarks/graph_memset_probe.cu) a memset node between two kernels adds ~1.9 us to the
// chain and ~2 us to the host's cudaGraphLaunch; a kernel node that writes the same bytes adds
// ~0.8 us and no measurable launch time. In the 953M step the host's time per step went 0.5 ->
// 0.0 ms and the gaps between the graph's nodes 1.3 -> 0.0 ms, and the wall time did not change
// (the step runs at the GPU's power cap; docs/benchmarks.md, the 953M step on one H200).
// A kernel node that writes the same bytes keeps every dependency of the memset node it
// replaces, so the graph does what it did (the same writes, in the same order against every
// other node); only how the bytes are written changes.
#ifndef MAGI_BACKEND_NCCL_STREAM_GRAPH_MEMSETS_H_
#define MAGI_BACKEND_NCCL_STREAM_GRAPH_MEMSETS_H_

#include <cuda_runtime_api.h>

#include <cstddef>

namespace magi::cuda {

struct MemsetRewrite {
  int rewritten = 0;  // memset nodes now kernel nodes
  int kept = 0;       // memset nodes left as they were (larger than the bound, or with edges
                      // of a kind other than the default: programmatic, port-specific)
};

// Rewrites every memset node of `graph` (not of its child graphs) that writes at most
// `max_bytes` bytes as a kernel node with the same dependencies and dependents, then
// destroys the memset node. Edit before instantiating: an executable instantiated earlier
// keeps the topology it was made from. The kernel nodes run on the device current when this
// is called: the graph's device must be current. Returns the first CUDA error;
// the graph is then partly rewritten, every node in one form or the other with all its
// edges, so it still does what it did.
cudaError_t RewriteSmallMemsetsAsKernels(cudaGraph_t graph, size_t max_bytes, MemsetRewrite* result);

}  // namespace magi::cuda

#endif  // MAGI_BACKEND_NCCL_STREAM_GRAPH_MEMSETS_H_
