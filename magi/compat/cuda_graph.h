// LibTorch's CUDA graph with the captured cudaGraph_t open for editing between the end of
// the capture and its instantiation (the version difference lives here).
//
// Where at::cuda::CUDAGraph takes keep_graph (checked here: 2.11 and 2.12; upstream added it
// earlier), CUDAGraph(keep_graph=true) leaves the graph uninstantiated at capture_end,
// raw_cuda_graph() hands it out and instantiate() makes the executable; the cudaGraph_t then
// lives (a little host memory) as long as the CUDAGraph. 1.13's CUDAGraph instantiates as the
// capture ends and keeps no graph: there kCanEditCapturedCudaGraph is false,
// CapturedCudaGraph returns null and the graph runs as captured.
#ifndef MAGI_COMPAT_CUDA_GRAPH_H_
#define MAGI_COMPAT_CUDA_GRAPH_H_

#include <ATen/cuda/CUDAGraph.h>
#include <torch/csrc/api/include/torch/version.h>

#include <memory>

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 11)
#define MAGI_TORCH_CUDA_GRAPH_EDITABLE 1
#else
#define MAGI_TORCH_CUDA_GRAPH_EDITABLE 0
#endif

namespace magi::compat {

inline constexpr bool kCanEditCapturedCudaGraph = MAGI_TORCH_CUDA_GRAPH_EDITABLE;

// A graph to capture into; with `editable` (where this LibTorch can), it stays a
// cudaGraph_t after capture_end until InstantiateCudaGraph.
inline std::unique_ptr<at::cuda::CUDAGraph> NewCudaGraph(bool editable) {
#if MAGI_TORCH_CUDA_GRAPH_EDITABLE
  return std::make_unique<at::cuda::CUDAGraph>(/*keep_graph=*/editable);
#else
  (void)editable;
  return std::make_unique<at::cuda::CUDAGraph>();
#endif
}

// After capture_end of a graph made editable: the captured graph, to edit before
// InstantiateCudaGraph. Null where it cannot be edited.
inline cudaGraph_t CapturedCudaGraph(at::cuda::CUDAGraph& graph, bool editable) {
#if MAGI_TORCH_CUDA_GRAPH_EDITABLE
  return editable ? graph.raw_cuda_graph() : nullptr;
#else
  (void)graph;
  (void)editable;
  return nullptr;
#endif
}

// Makes the executable of an editable graph (capture_end already did for the others).
// Throws c10::Error as LibTorch does.
inline void InstantiateCudaGraph(at::cuda::CUDAGraph& graph, bool editable) {
#if MAGI_TORCH_CUDA_GRAPH_EDITABLE
  if (editable) graph.instantiate();
#else
  (void)graph;
  (void)editable;
#endif
}

}  // namespace magi::compat

#endif  // MAGI_COMPAT_CUDA_GRAPH_H_
