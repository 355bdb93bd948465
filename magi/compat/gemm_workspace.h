// Device memory that PyTorch's GEMM workspaces hold: memory the CUDA caching allocator
// counts (torch.cuda.max_memory_allocated, RunStats::peak_live_bytes of nccl_stream) but no
// step plan does, since no graph value owns it.
//
// LibTorch gives each (cuBLAS handle, stream) pair that runs a GEMM a workspace of
// getChosenWorkspaceSize() bytes, allocated through the caching allocator at the pair's first
// GEMM and kept until clearCublasWorkspaces (handles are per thread, so a stream used from
// two threads holds two; 2.12 also frees a CUDA graph's capture-stream workspace when the
// graph is reset). cuBLASLt GEMMs (addmm with a bias) take a second workspace per pair of
// getCUDABlasLtWorkspaceSize() bytes unless TORCH_CUBLASLT_UNIFIED_WORKSPACE=1 shares the
// cuBLAS one. Measured on an H200 with PyTorch 2.11 (docs/benchmarks.md's GEMM workspaces,
// benchmarks/cublas_workspace_probe.py): 32 MiB per pair for cuBLAS, 1 MiB
// for cuBLASLt; the small model's nccl_stream step held two pairs eagerly, three as a CUDA
// graph (the capture stream's), 64 and 96 MiB beyond its plan.
//
// The maps are LibTorch internals whose shape changes between versions (upstream has since
// made their values (DataPtr, size) pairs): read where their form is known, 2.11 (measured)
// and 2.12 (compiled); elsewhere GemmWorkspaceBytesOn says -1 (unknown).
#ifndef MAGI_COMPAT_GEMM_WORKSPACE_H_
#define MAGI_COMPAT_GEMM_WORKSPACE_H_

#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/api/include/torch/version.h>

#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <tuple>

#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 11 && TORCH_VERSION_MINOR <= 12
#define MAGI_TORCH_GEMM_WORKSPACE_MAPS 1
#include <c10/util/env.h>
#else
#define MAGI_TORCH_GEMM_WORKSPACE_MAPS 0
#endif

namespace magi::compat {

// The bytes PyTorch's GEMM workspaces hold now on CUDA device `device`; -1 where this
// LibTorch does not say.
inline int64_t GemmWorkspaceBytesOn(int device) {
#if MAGI_TORCH_GEMM_WORKSPACE_MAPS
  // Every entry of a map holds the size its kind is made with (the sizes are fixed per process).
  auto entries_on_device = [device](at::cuda::WorkspaceMapWithMutex& workspaces) {
    std::shared_lock<std::shared_mutex> lock(workspaces.mutex);
    int64_t n = 0;
    for (const auto& [key, data] : workspaces.map) n += data.device().is_cuda() && data.device().index() == device;
    return n;
  };
  return entries_on_device(at::cuda::cublas_handle_stream_to_workspace()) *
             static_cast<int64_t>(at::cuda::getChosenWorkspaceSize()) +
         entries_on_device(at::cuda::cublaslt_handle_stream_to_workspace()) *
             static_cast<int64_t>(at::cuda::getCUDABlasLtWorkspaceSize());
#else
  (void)device;
  return -1;
#endif
}

// Whether PyTorch holds a cuBLAS workspace for `stream` on `device` (under any handle).
inline bool HoldsGemmWorkspaceFor(int device, cudaStream_t stream) {
#if MAGI_TORCH_GEMM_WORKSPACE_MAPS
  at::cuda::WorkspaceMapWithMutex& workspaces = at::cuda::cublas_handle_stream_to_workspace();
  std::shared_lock<std::shared_mutex> lock(workspaces.mutex);
  for (const auto& [key, data] : workspaces.map) {
    if (data.device().is_cuda() && data.device().index() == device &&
        std::get<1>(key) == static_cast<void*>(stream)) {
      return true;
    }
  }
#else
  (void)device;
  (void)stream;
#endif
  return false;
}

// What the first GEMMs of one more (handle, stream) pair make PyTorch hold: its cuBLAS
// workspace and, with `bias_gemms` (addmm's cuBLASLt path) unless
// TORCH_CUBLASLT_UNIFIED_WORKSPACE shares the cuBLAS one, its cuBLASLt workspace. -1 where
// GemmWorkspaceBytesOn cannot say.
inline int64_t GemmWorkspaceBytesOfNewPair(bool bias_gemms) {
#if MAGI_TORCH_GEMM_WORKSPACE_MAPS
  const bool unified = c10::utils::check_env("TORCH_CUBLASLT_UNIFIED_WORKSPACE") == true;
  return static_cast<int64_t>(at::cuda::getChosenWorkspaceSize()) +
         (bias_gemms && !unified ? static_cast<int64_t>(at::cuda::getCUDABlasLtWorkspaceSize()) : 0);
#else
  (void)bias_gemms;
  return -1;
#endif
}

}  // namespace magi::compat

#endif  // MAGI_COMPAT_GEMM_WORKSPACE_H_
