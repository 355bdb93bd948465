// The persistent decode kernel (decode_kernel.h): each block runs its SM's queue; each
// instruction computes what reference_executor.cc's Executor::Run computes.
#include "magi/backend/megakernel/decode_kernel.h"

#include <cuda/atomic>
#include <cuda_bf16.h>

namespace magi::megakernel {
namespace {

// Opcode's numbering (instruction_program.h; device_program.cc checks it).
enum : int32_t { kEmbed = 0, kQkv, kAttention, kOProj, kGateUp, kDown, kLogits, kArgmax };

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kRowsPerWarp = 2;  // matrix rows a warp computes at once (MatrixRows)
constexpr int kInFlight = 4;     // a lane's 16-byte weight loads in flight per row

using bf16 = __nv_bfloat16;
using Counter = cuda::atomic_ref<uint32_t, cuda::thread_scope_device>;

struct Shared {
  float out[kMaxTileRows * kMaxBatch];   // a tile's products, [row][sequence]
  float out2[kMaxTileRows * kMaxBatch];  // gate_up's up rows
  float scores[kMaxWindow];
  float q[kMaxHeadDim];
  float inverse_rms[kMaxBatch];
  float reduce[kWarps];
  int reduce_index[kWarps];
};

__device__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// The sum over the block (every thread gets it).
__device__ float BlockSum(float v, Shared& s) {
  v = WarpSum(v);
  __syncthreads();
  if (threadIdx.x % 32 == 0) s.reduce[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0;
  for (int w = 0; w < kWarps; ++w) total += s.reduce[w];
  return total;
}

// The maximum over the block (every thread gets it).
__device__ float BlockMax(float v, Shared& s) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  __syncthreads();
  if (threadIdx.x % 32 == 0) s.reduce[threadIdx.x / 32] = v;
  __syncthreads();
  float most = s.reduce[0];
  for (int w = 1; w < kWarps; ++w) most = fmaxf(most, s.reduce[w]);
  return most;
}

// The maximum over the block and its lowest index (every thread gets them).
__device__ void BlockArgMax(float& v, int& index, Shared& s) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_xor_sync(kFullMask, v, offset);
    const int other_index = __shfl_xor_sync(kFullMask, index, offset);
    if (other > v || (other == v && other_index < index)) {
      v = other;
      index = other_index;
    }
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) {
    s.reduce[threadIdx.x / 32] = v;
    s.reduce_index[threadIdx.x / 32] = index;
  }
  __syncthreads();
  v = s.reduce[0];
  index = s.reduce_index[0];
  for (int w = 1; w < kWarps; ++w) {
    if (s.reduce[w] > v || (s.reduce[w] == v && s.reduce_index[w] < index)) {
      v = s.reduce[w];
      index = s.reduce_index[w];
    }
  }
}

// Sequence b's position this step, clamped into the window (decode_kernel.h).
__device__ int64_t Position(const KernelArgs& a, int b) {
  const int64_t position = a.positions[b];
  return position < 0 ? 0 : (position >= a.window ? a.window - 1 : position);
}

// Sequence b's token, clamped into the vocabulary for the same reason.
__device__ int64_t Token(const KernelArgs& a, int b) {
  const int64_t token = a.tokens[b];
  return token < 0 ? 0 : (token >= a.vocab ? a.vocab - 1 : token);
}

// The GPU's global timer in ns, the same on every SM (the timeline's clock).
__device__ uint64_t GlobalTimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Another block's writes are read from L2 (__ldcg): an L1 line of this SM may be stale.
__device__ float Load(const float* p) { return __ldcg(p); }
__device__ float Weight(const void* p, int64_t i) { return __bfloat162float(static_cast<const bf16*>(p)[i]); }

// 1 / sqrt(mean(hidden[b]^2) + eps) for every sequence, into s.inverse_rms.
__device__ void InverseRms(const KernelArgs& a, float eps, Shared& s) {
  for (int b = 0; b < a.batch; ++b) {
    float sum = 0;
    for (int k = threadIdx.x; k < a.dim; k += kThreads) {
      const float x = Load(a.hidden + static_cast<int64_t>(b) * a.dim + k);
      sum += x * x;
    }
    sum = BlockSum(sum, s);
    if (threadIdx.x == 0) s.inverse_rms[b] = rsqrtf(sum / a.dim + eps);
  }
  __syncthreads();
}

// out[(r - r0) * kMaxBatch + b] = sum_k W[r, k] * input(b, k) for rows [r0, r1): a warp computes
// kRowsPerWarp rows at once (each input value read once for all of them), each lane keeping
// kInFlight 16-byte weight loads per row in flight before it uses any (one load at a time per
// warp kept too few bytes in flight to stream an SM's share of the memory bandwidth); K % 8 == 0;
// fp32 sums, each row's in the same order whatever the batch.
template <typename Input>
__device__ void MatrixRows(const void* weights, int k_size, int r0, int r1, int batch, Input input, float* out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int first = r0 + warp * kRowsPerWarp; first < r1; first += kWarps * kRowsPerWarp) {
    float sums[kRowsPerWarp][kMaxBatch];
    const bf16* rows[kRowsPerWarp];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      // A row past the tile reads the tile's last row again; its sums are not stored.
      rows[i] = static_cast<const bf16*>(weights) + static_cast<int64_t>(min(first + i, r1 - 1)) * k_size;
#pragma unroll
      for (int b = 0; b < kMaxBatch; ++b) sums[i][b] = 0;
    }
    for (int k0 = lane * 8; k0 < k_size; k0 += 32 * 8 * kInFlight) {
      uint4 raw[kRowsPerWarp][kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        const int k = k0 + u * 32 * 8;
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; ++i) {
          raw[i][u] = k < k_size ? __ldg(reinterpret_cast<const uint4*>(rows[i] + k)) : make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        const int k = k0 + u * 32 * 8;
        if (k < k_size) {
#pragma unroll
          for (int j = 0; j < 8; ++j) {
#pragma unroll
            for (int b = 0; b < kMaxBatch; ++b) {
              if (b < batch) {
                const float x = input(b, k + j);
#pragma unroll
                for (int i = 0; i < kRowsPerWarp; ++i) {
                  sums[i][b] += __bfloat162float(reinterpret_cast<const bf16*>(&raw[i][u])[j]) * x;
                }
              }
            }
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
#pragma unroll
      for (int b = 0; b < kMaxBatch; ++b) {
        const float total = WarpSum(sums[i][b]);
        if (lane == 0 && b < batch && first + i < r1) out[(first + i - r0) * kMaxBatch + b] = total;
      }
    }
  }
  __syncthreads();
}

// A tile's input vectors, [batch][k_size] floats, in dynamic shared memory when the launch gave
// enough (KernelArgs::staged_floats): computed once per instruction (the norm applied) instead of
// once per row, and then read from shared memory instead of L2.
// Runs `rows(input)` with `input(b, k)` staged when it fits, else as given.
template <typename Input, typename Rows>
__device__ void WithStagedInput(const KernelArgs& a, int k_size, Input input, Rows rows) {
  extern __shared__ float staged[];
  if (a.staged_floats < a.batch * k_size) {
    rows(input);
    return;
  }
  for (int b = 0; b < a.batch; ++b) {
    for (int k = threadIdx.x; k < k_size; k += kThreads) staged[b * k_size + k] = input(b, k);
  }
  __syncthreads();
  rows([k_size](int b, int k) { return staged[b * k_size + k]; });
  // MatrixRows ends with a barrier: the next instruction may overwrite `staged`.
}

// Rows [r0, r1) of the concatenated q/k/v projection of the normalized hidden state, for every
// sequence, into the fp32 qkv scratch (attention rotates q and k and writes the cache).
__device__ void RunQkv(const KernelArgs& a, const DeviceInstruction& in, Shared& s) {
  const KernelLayer& layer = a.layers[in.layer];
  InverseRms(a, layer.attention_eps, s);
  const float* hidden = a.hidden;
  const int dim = a.dim, r0 = in.row_begin, r1 = in.row_end, qkv_rows = (a.n_heads + 2 * a.n_kv_heads) * a.head_dim;
  auto input = [&](int b, int k) {
    return Load(hidden + static_cast<int64_t>(b) * dim + k) * s.inverse_rms[b] * Weight(layer.attention_norm, k);
  };
  WithStagedInput(a, dim, input, [&](auto x) { MatrixRows(layer.qkv, dim, r0, r1, a.batch, x, s.out); });
  for (int b = 0; b < a.batch; ++b) {
    for (int r = r0 + threadIdx.x; r < r1; r += kThreads) {
      a.qkv[static_cast<int64_t>(b) * qkv_rows + r] = s.out[(r - r0) * kMaxBatch + b];
    }
  }
}

// Sequence b, kv group g: RoPE on the group's query heads (into shared memory) and on its key
// head, the key and value written into the caches at the step's position, then each query head
// over the cache's positions 0..position.
__device__ void RunAttention(const KernelArgs& a, const DeviceInstruction& in, Shared& s) {
  const KernelLayer& layer = a.layers[in.layer];
  const int g = in.row_begin, b = in.batch_begin, hd = a.head_dim, half = hd / 2, group = a.n_heads / a.n_kv_heads;
  const int qkv_rows = (a.n_heads + 2 * a.n_kv_heads) * hd;
  const int64_t position = Position(a, b);
  const int visible = static_cast<int>(position) + 1;
  const float* row = a.qkv + static_cast<int64_t>(b) * qkv_rows;
  const float* k_in = row + (a.n_heads + g) * hd;
  const float* v_in = row + (a.n_heads + a.n_kv_heads + g) * hd;
  const int64_t cache_base = (static_cast<int64_t>(b) * a.n_kv_heads + g) * a.window * hd;
  bf16* key_cache = static_cast<bf16*>(layer.key_cache) + cache_base;
  bf16* value_cache = static_cast<bf16*>(layer.value_cache) + cache_base;
  for (int i = threadIdx.x; i < half; i += kThreads) {
    const float c = Weight(a.rope_cos, position * half + i), sn = Weight(a.rope_sin, position * half + i);
    const float x1 = Load(k_in + i), x2 = Load(k_in + i + half);
    key_cache[position * hd + i] = __float2bfloat16(x1 * c - x2 * sn);
    key_cache[position * hd + i + half] = __float2bfloat16(x2 * c + x1 * sn);
  }
  for (int i = threadIdx.x; i < hd; i += kThreads) value_cache[position * hd + i] = __float2bfloat16(Load(v_in + i));
  // The block's own cache writes are read below through L2 (global stores write through L1).
  __syncthreads();
  const float scale = rsqrtf(static_cast<float>(hd));
  for (int j = 0; j < group; ++j) {
    const int head = g * group + j;
    const float* q_in = row + head * hd;
    for (int i = threadIdx.x; i < half; i += kThreads) {
      const float c = Weight(a.rope_cos, position * half + i), sn = Weight(a.rope_sin, position * half + i);
      const float x1 = Load(q_in + i), x2 = Load(q_in + i + half);
      s.q[i] = x1 * c - x2 * sn;
      s.q[i + half] = x2 * c + x1 * sn;
    }
    __syncthreads();
    // Scores: a warp per position, its lanes over the head's dimensions (coalesced cache reads,
    // a warp sum), instead of a thread per position reading a whole key row alone.
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int p = warp; p < visible; p += kWarps) {
      float dot = 0;
      for (int i = lane; i < hd; i += 32) dot += s.q[i] * __bfloat162float(__ldcg(key_cache + p * hd + i));
      dot = WarpSum(dot);
      if (lane == 0) s.scores[p] = dot * scale;
    }
    __syncthreads();
    float most = -INFINITY;
    for (int p = threadIdx.x; p < visible; p += kThreads) most = fmaxf(most, s.scores[p]);
    most = BlockMax(most, s);
    float sum = 0;
    for (int p = threadIdx.x; p < visible; p += kThreads) {
      s.scores[p] = __expf(s.scores[p] - most);
      sum += s.scores[p];
    }
    sum = BlockSum(sum, s);
    // The weighted values: kThreads / hd threads per dimension, each over every parts-th
    // position, their partial sums then added in a fixed order.
    const int parts = max(1, kThreads / hd);
    for (int t = threadIdx.x; t < parts * hd; t += kThreads) {
      const int i = t % hd, part = t / hd;
      float acc = 0;
      for (int p = part; p < visible; p += parts) acc += s.scores[p] * __bfloat162float(__ldcg(value_cache + p * hd + i));
      s.out[t] = acc;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < hd; i += kThreads) {
      float acc = 0;
      for (int part = 0; part < parts; ++part) acc += s.out[part * hd + i];
      a.attention[static_cast<int64_t>(b) * a.n_heads * hd + head * hd + i] = acc / sum;
    }
    __syncthreads();
  }
}

__device__ void Run(const KernelArgs& a, const DeviceInstruction& in, Shared& s) {
  const int r0 = in.row_begin, r1 = in.row_end, dim = a.dim;
  switch (in.opcode) {
    case kEmbed:
      for (int b = 0; b < a.batch; ++b) {
        for (int r = r0 + threadIdx.x; r < r1; r += kThreads) {
          a.hidden[static_cast<int64_t>(b) * dim + r] = Weight(a.embedding, Token(a, b) * dim + r);
        }
      }
      break;
    case kQkv:
      RunQkv(a, in, s);
      break;
    case kAttention:
      RunAttention(a, in, s);
      break;
    case kOProj:
    case kDown: {
      const KernelLayer& layer = a.layers[in.layer];
      const float* source = in.opcode == kOProj ? a.attention : a.activation;
      const int k_size = in.opcode == kOProj ? dim : a.ffn;
      WithStagedInput(a, k_size, [&](int b, int k) { return Load(source + static_cast<int64_t>(b) * k_size + k); },
                      [&](auto x) { MatrixRows(in.opcode == kOProj ? layer.o : layer.down, k_size, r0, r1, a.batch, x, s.out); });
      for (int b = 0; b < a.batch; ++b) {
        for (int r = r0 + threadIdx.x; r < r1; r += kThreads) {
          float* h = a.hidden + static_cast<int64_t>(b) * dim + r;
          *h = Load(h) + s.out[(r - r0) * kMaxBatch + b];
        }
      }
      break;
    }
    case kGateUp: {
      const KernelLayer& layer = a.layers[in.layer];
      InverseRms(a, layer.ffn_eps, s);
      auto input = [&](int b, int k) {
        return Load(a.hidden + static_cast<int64_t>(b) * dim + k) * s.inverse_rms[b] * Weight(layer.ffn_norm, k);
      };
      WithStagedInput(a, dim, input, [&](auto x) {
        MatrixRows(layer.gate_up, dim, r0, r1, a.batch, x, s.out);
        MatrixRows(layer.gate_up, dim, a.ffn + r0, a.ffn + r1, a.batch, x, s.out2);
      });
      for (int b = 0; b < a.batch; ++b) {
        for (int r = r0 + threadIdx.x; r < r1; r += kThreads) {
          const float gate = s.out[(r - r0) * kMaxBatch + b], up = s.out2[(r - r0) * kMaxBatch + b];
          a.activation[static_cast<int64_t>(b) * a.ffn + r] = gate / (1.0f + __expf(-gate)) * up;
        }
      }
      break;
    }
    case kLogits: {
      InverseRms(a, a.final_eps, s);
      auto input = [&](int b, int k) {
        return Load(a.hidden + static_cast<int64_t>(b) * dim + k) * s.inverse_rms[b] * Weight(a.final_norm, k);
      };
      WithStagedInput(a, dim, input, [&](auto x) { MatrixRows(a.lm_head, dim, r0, r1, a.batch, x, s.out); });
      for (int b = 0; b < a.batch; ++b) {
        for (int r = r0 + threadIdx.x; r < r1; r += kThreads) {
          a.logits[static_cast<int64_t>(b) * a.vocab + r] = s.out[(r - r0) * kMaxBatch + b];
        }
      }
      break;
    }
    case kArgmax: {
      const int b = in.batch_begin;
      float best = -INFINITY;
      int index = a.vocab;
      for (int v = threadIdx.x; v < a.vocab; v += kThreads) {
        const float x = Load(a.logits + static_cast<int64_t>(b) * a.vocab + v);
        if (x > best) {
          best = x;
          index = v;
        }
      }
      BlockArgMax(best, index, s);
      if (threadIdx.x == 0) a.next_token[b] = index;
      break;
    }
  }
}

__global__ void __launch_bounds__(kThreads, 1) DecodeStep(KernelArgs a) {
  __shared__ Shared s;
  __shared__ uint32_t step;
  if (threadIdx.x == 0) step = a.block_steps[blockIdx.x];
  __syncthreads();
  for (int q = a.queue_begin[blockIdx.x]; q < a.queue_begin[blockIdx.x + 1]; ++q) {
    const int index = a.queue[q];
    const DeviceInstruction in = a.instructions[index];
    uint64_t wait_begin = 0, start = 0;
    if (threadIdx.x == 0) {
      wait_begin = GlobalTimer();
      for (int w = 0; w < in.num_waits; ++w) {
        const uint32_t target = (step + 1) * in.wait_increments[w];
        Counter counter(a.counters[in.waits[w]]);
        while (counter.load(cuda::memory_order_acquire) < target) __nanosleep(64);
      }
      start = GlobalTimer();
    }
    __syncthreads();
    Run(a, in, s);
    // Every thread's writes reach L2 before thread 0 releases the counters.
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int i = 0; i < in.num_signals; ++i) Counter(a.counters[in.signals[i]]).fetch_add(1, cuda::memory_order_release);
      uint64_t* record = a.timeline + 3 * static_cast<int64_t>(index);
      record[0] = wait_begin;
      record[1] = start;
      record[2] = GlobalTimer();
    }
  }
  // Only this block reads its count, in the next launch (stream-ordered after this one).
  if (threadIdx.x == 0) a.block_steps[blockIdx.x] = step + 1;
}

}  // namespace

cudaError_t LaunchDecodeStep(const KernelArgs& args, int num_sms, cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(num_sms);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = static_cast<size_t>(args.staged_floats) * sizeof(float);
  config.stream = stream;
  cudaLaunchAttribute cooperative = {};
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  config.attrs = &cooperative;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, DecodeStep, args);
}

cudaError_t DecodeStepMaxStagedFloats(int* floats) {
  int device = 0, optin = 0;
  cudaFuncAttributes attributes;
  if (cudaError_t error = cudaGetDevice(&device); error != cudaSuccess) return error;
  if (cudaError_t error = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
      error != cudaSuccess) {
    return error;
  }
  if (cudaError_t error = cudaFuncGetAttributes(&attributes, DecodeStep); error != cudaSuccess) return error;
  const int left = optin - static_cast<int>(attributes.sharedSizeBytes);
  *floats = left > 0 ? left / static_cast<int>(sizeof(float)) : 0;
  return cudaSuccess;
}

cudaError_t DecodeStepBlocksPerSm(int staged_floats, int* blocks) {
  // The function's limit is set to the most the device allows, not to this program's need:
  // programs of other shapes in the same process launch with their own sizes under it.
  int most = 0;
  if (cudaError_t error = DecodeStepMaxStagedFloats(&most); error != cudaSuccess) return error;
  if (cudaError_t error = cudaFuncSetAttribute(DecodeStep, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               most * static_cast<int>(sizeof(float)));
      error != cudaSuccess) {
    return error;
  }
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, DecodeStep, kThreads,
                                                       static_cast<size_t>(staged_floats) * sizeof(float));
}

}  // namespace magi::megakernel
