// LibTorch's CUDA graph with the captured cudaGraph_t open for editing between the end of
// the capture and its instantiation (the version difference lives here).
//
// PyTorch 2.11 (and later): at::cuda::CUDAGraph(keep_graph=true) leaves the graph
// uninstantiated at capture_end, raw_cuda_graph() hands it out, instantiate() makes the
// executable. 1.13's CUDAGraph instantiates as the capture ends and keeps no graph:
// there kCanEditCapturedCudaGraph is false, CapturedCudaGraph returns null and the graph
// runs as captured.
#ifndef MAGI_COMPAT_CUDA_GRAPH_H_
#define MAGI_COMPAT_CUDA_GRAPH_H_

#include <ATen/cuda/CUDAGraph.h>
#include <torch/csrc/api/include/torch/version.h>

#include <memory>

namespace magi::compat {

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 11)
inline constexpr bool kCanEditCapturedCudaGraph = true;
#else
inline constexpr bool kCanEditCapturedCudaGraph = false;
#endif

// A graph to capture into; with `editable` (where this LibTorch can), it stays a
// cudaGraph_t after capture_end until InstantiateCudaGraph.
inline std::unique_ptr<at::cuda::CUDAGraph> NewCudaGraph(bool editable) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 11)
  return std::make_unique<at::cuda::CUDAGraph>(/*keep_graph=*/editable);
#else
  (void)editable;
  return std::make_unique<at::cuda::CUDAGraph>();
#endif
}

// After capture_end of a graph made editable: the captured graph, to edit before
// InstantiateCudaGraph. Null where it cannot be edited (1.13, or not made editable).
inline cudaGraph_t CapturedCudaGraph(at::cuda::CUDAGraph& graph, bool editable) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 11)
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
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 11)
  if (editable) graph.instantiate();
#else
  (void)graph;
  (void)editable;
#endif
}

}  // namespace magi::compat

#endif  // MAGI_COMPAT_CUDA_GRAPH_H_
