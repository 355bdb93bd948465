// How much a small memset node costs between two kernels in a CUDA graph, against a kernel
// node that writes the same bytes, and against nothing; and nccl_stream's memset -> kernel
// rewrite of a captured graph (magi/backend/nccl_stream/graph_memsets.h). Prints
// per chain of 300 and of 1000 links (a work kernel, then the link): the device time per link
// of back-to-back replays, the host time of one cudaGraphLaunch on an idle device, and how
// much longer than a back-to-back replay that one launch took to finish (the device waiting
// for the graph to start, plus the host's wake-up). On the GPU machine, from the repository root:
//
//   nvcc -O2 -std=c++17 -I. -gencode arch=compute_90,code=sm_90 -o /tmp/graph_memset_probe \
//       benchmarks/graph_memset_probe.cu magi/backend/nccl_stream/graph_memsets.cu && /tmp/graph_memset_probe
//
// (or build it here with /usr/local/cuda/bin/nvcc and `-cudart static`, and run the binary there).
#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "magi/backend/nccl_stream/graph_memsets.h"

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); std::exit(1);} } while (0)

__global__ void Work(float* x, int n, int rounds) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  for (int r = 0; r < rounds; ++r) v = v * 0.999f + 0.001f;
  x[i] = v;
}
__global__ void Fill32(unsigned* p, unsigned value, size_t count) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) p[i] = value;
}

enum Link { kNothing, kMemset, kFillKernel, kMemsetRewritten };

void Rewrite(cudaGraph_t graph) {
  magi::cuda::MemsetRewrite result;
  CHECK(magi::cuda::RewriteSmallMemsetsAsKernels(graph, 4096, &result));
  std::printf("  rewrote %d memset nodes (%d kept)\n", result.rewritten, result.kept);
}

int main() {
  const int n = 132 * 256 * 4, rounds = 200;
  float* x;
  unsigned* counter;
  CHECK(cudaMalloc(&x, n * sizeof(float)));
  CHECK(cudaMalloc(&counter, 64));
  CHECK(cudaMemset(x, 0, n * sizeof(float)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const char* names[] = {"kernel -> kernel", "kernel -> memset 4 B -> kernel", "kernel -> fill kernel 4 B -> kernel",
                         "memset rewritten to a fill kernel"};
  for (int links : {300, 1000}) {
    std::printf("chains of %d links (work kernel of %d rounds + link):\n", links, rounds);
    std::printf("  %-40s %10s %14s %14s\n", "link", "us/link", "launch us", "host->first us");
    for (int variant = 0; variant < 4; ++variant) {
      cudaGraph_t graph;
      CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < links; ++i) {
        Work<<<n / 256, 256, 0, s>>>(x, n, rounds);
        if (variant == kMemset || variant == kMemsetRewritten) CHECK(cudaMemsetAsync(counter, 0, 4, s));
        if (variant == kFillKernel) Fill32<<<1, 32, 0, s>>>(counter, 0u, 1);
      }
      CHECK(cudaStreamEndCapture(s, &graph));
      if (variant == kMemsetRewritten) Rewrite(graph);
      cudaGraphExec_t exec;
      CHECK(cudaGraphInstantiate(&exec, graph, 0));
      cudaEvent_t a, b;
      CHECK(cudaEventCreate(&a));
      CHECK(cudaEventCreate(&b));
      for (int w = 0; w < 5; ++w) CHECK(cudaGraphLaunch(exec, s));
      CHECK(cudaEventRecord(a, s));
      const int reps = 30;
      for (int r = 0; r < reps; ++r) CHECK(cudaGraphLaunch(exec, s));
      CHECK(cudaEventRecord(b, s));
      CHECK(cudaEventSynchronize(b));
      float ms;
      CHECK(cudaEventElapsedTime(&ms, a, b));
      const double replay_us = 1e3 * ms / reps;
      // One launch on an idle device, as a training step does: the host's cudaGraphLaunch
      // call, and from the call to the end of the replay less the back-to-back replay time
      // (how long the device waited for the graph to start).
      std::vector<double> launch_us, wait_us;
      for (int r = 0; r < 15; ++r) {
        CHECK(cudaStreamSynchronize(s));
        auto t0 = std::chrono::steady_clock::now();
        CHECK(cudaGraphLaunch(exec, s));
        auto t1 = std::chrono::steady_clock::now();
        CHECK(cudaStreamSynchronize(s));
        auto t2 = std::chrono::steady_clock::now();
        launch_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        wait_us.push_back(std::chrono::duration<double, std::micro>(t2 - t0).count() - replay_us);
      }
      std::sort(launch_us.begin(), launch_us.end());
      std::sort(wait_us.begin(), wait_us.end());
      std::printf("  %-40s %10.2f %14.1f %14.1f\n", names[variant], replay_us / links, launch_us[7], wait_us[7]);
      CHECK(cudaEventDestroy(a));
      CHECK(cudaEventDestroy(b));
      CHECK(cudaGraphExecDestroy(exec));
      CHECK(cudaGraphDestroy(graph));
    }
  }
  return 0;
}
