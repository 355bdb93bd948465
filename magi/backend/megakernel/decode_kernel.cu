// The persistent decode kernel (decode_kernel.h): each block runs its SM's queue; each
// instruction computes what reference_executor.cc's Executor::Run computes.
#include "magi/backend/megakernel/decode_kernel.h"

#include <algorithm>

#include <cuda/atomic>
#include <cuda_bf16.h>

namespace magi::megakernel {
namespace {

// Opcode's numbering (instruction_program.h; device_program.cc checks it).
enum : int32_t { kEmbed = 0, kQkv, kAttention, kOProj, kGateUp, kDown, kLogits, kArgmax, kAttentionPart, kAttentionCombine };

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFullMask = 0xffffffffu;

using bf16 = __nv_bfloat16;
using Counter = cuda::atomic_ref<uint32_t, cuda::thread_scope_device>;

struct Shared {
  float out[kMaxTileRows * kMaxBatch];   // a tile's products, [row][sequence]
  float out2[kMaxTileRows * kMaxBatch];  // gate_up's up rows
  float scores[kMaxWindow];
  float q[kMaxHeadDim];
  float attended[kMaxHeadDim];  // a head's weighted values (AttendRange)
  alignas(16) bf16 step_key[kMaxHeadDim];  // the step's key (rotated) and value, as the cache holds them
  alignas(16) bf16 step_value[kMaxHeadDim];
  float inverse_rms[kMaxBatch];
  float reduce[kWarps];
  int reduce_index[kWarps];
  float partial[2][kWarps * 2 * kMaxBatch];  // a ring chunk's per-warp sums of two rows (RingRows), by chunk parity
};

// The block's dynamic shared memory: the staged inputs (KernelArgs::staged_floats), then the
// weight ring (KernelArgs::ring_offset_bytes).
__device__ unsigned char* DynamicShared() {
  extern __shared__ __align__(128) unsigned char dynamic_shared[];
  return dynamic_shared;
}

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

// A tile's input vectors as the matrix loops read them: Load8(b, k, x) puts sequence b's
// values k..k+7 (k a multiple of 8) into x.
// Staged in shared memory ([batch][k_size] floats): two 16-byte loads. (Eight 4-byte loads at a
// lane stride of 32 bytes hit the same bank 8 ways: the loops were bound by shared memory.)
struct StagedInput {
  const float* values;
  int k_size;
  __device__ void Load8(int b, int k, float (&x)[8]) const {
    const float4* p = reinterpret_cast<const float4*>(values + b * k_size + k);
    const float4 lo = p[0], hi = p[1];
    x[0] = lo.x, x[1] = lo.y, x[2] = lo.z, x[3] = lo.w, x[4] = hi.x, x[5] = hi.y, x[6] = hi.z, x[7] = hi.w;
  }
};

// Computed per value by `f(b, k)` (from L2, the norm applied): where staging does not fit.
template <typename F>
struct ComputedInput {
  F f;
  __device__ void Load8(int b, int k, float (&x)[8]) const {
#pragma unroll
    for (int j = 0; j < 8; ++j) x[j] = f(b, k + j);
  }
};

// out[(r - r0) * kMaxBatch + b] = sum_k W[r, k] * input(b, k) for rows [r0, r1): a warp computes
// kRowsPerWarp rows at once (each input value read once for all of them), each lane keeping
// kInFlight 16-byte weight loads per row in flight before it uses any (one load at a time per
// warp kept too few bytes in flight to stream an SM's share of the memory bandwidth); K % 8 == 0;
// fp32 sums, each row's in the same order whatever the batch and the two constants (a lane sums
// its columns lane * 8 + 256 i in increasing i).
template <int kRowsPerWarp, int kInFlight, typename Input>
__device__ void MatrixRowsOf(const void* weights, int k_size, int r0, int r1, int batch, Input input, float* out) {
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
          for (int b = 0; b < kMaxBatch; ++b) {
            if (b < batch) {
              float x[8];
              input.Load8(b, k, x);
#pragma unroll
              for (int j = 0; j < 8; ++j) {
#pragma unroll
                for (int i = 0; i < kRowsPerWarp; ++i) {
                  sums[i][b] += __bfloat162float(reinterpret_cast<const bf16*>(&raw[i][u])[j]) * x[j];
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

// Up to 4 sequences, two rows per warp with four loads each in flight; more sequences, four rows
// per warp with two loads each: a staged input costs one shared-memory read per row group, so
// more rows per read keep batch 8 from being bound by shared memory, with the same 8 loads in
// flight per lane.
template <typename Input>
__device__ void MatrixRows(const void* weights, int k_size, int r0, int r1, int batch, Input input, float* out) {
  if (batch > 4) {
    MatrixRowsOf<4, 2>(weights, k_size, r0, r1, batch, input, out);
  } else {
    MatrixRowsOf<2, 4>(weights, k_size, r0, r1, batch, input, out);
  }
}

// A tile's input vectors staged in bf16 ([batch][k_size]) for the tensor cores (MmaRows).
struct StagedBf16Input {
  const bf16* values;
  int k_size;
};

// d += a x b for one m16n8k16 tile (bf16 in, fp32 accumulate): PTX ISA, "mma.sync" with
// .bf16: lane (g, t) = (lane / 4, lane % 4) holds A rows g and g + 8, B column g, and D rows g
// and g + 8 at columns 2t and 2t + 1.
__device__ void Mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// What MatrixRows computes, on the tensor cores: 16-row groups of the tile times the (up to 8)
// sequences' bf16 inputs, a group's k range split over the warps the groups leave (`parts`),
// the parts' sums added in part order through `scratch` (>= 2,048 floats). A dot product does
// not care in which order k is summed, so A and B share one permutation of k: in each 32-wide
// block lane (g, t) loads 16 contiguous bytes (k = 8t..8t+7) of weight rows g and g + 8 and of
// sequence g's input, and feeds values 0-3 to one mma and 4-7 to the next (the fragments' own
// layout would need 4-byte pieces). A sequence is a column: its sums do not depend on the batch.
constexpr int kMmaBlocksInFlight = 4;
__device__ void MmaRows(const void* weights, int k_size, int r0, int r1, int batch, StagedBf16Input input, float* out,
                        float* scratch) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int rows = r1 - r0, groups = (rows + 15) / 16, parts = groups > 0 ? max(1, kWarps / groups) : 1;
  const int blocks = (k_size + 31) / 32, per_part = (blocks + parts - 1) / parts;
  const bf16* w = static_cast<const bf16*>(weights);
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int item = warp; item < groups * parts; item += kWarps) {
    const int group = item / parts, part = item % parts;
    // Rows past the tile read its last row again; their sums are not stored.
    const bf16* row_lo = w + static_cast<int64_t>(min(r0 + group * 16 + g, r1 - 1)) * k_size;
    const bf16* row_hi = w + static_cast<int64_t>(min(r0 + group * 16 + g + 8, r1 - 1)) * k_size;
    const bf16* x = input.values + static_cast<int64_t>(min(g, batch - 1)) * k_size;
    float d[4] = {0, 0, 0, 0};
    const int end = min(blocks, (part + 1) * per_part);
    for (int first = part * per_part; first < end; first += kMmaBlocksInFlight) {
      uint4 lo[kMmaBlocksInFlight], hi[kMmaBlocksInFlight], in[kMmaBlocksInFlight];
#pragma unroll
      for (int u = 0; u < kMmaBlocksInFlight; ++u) {
        const int k = (first + u) * 32 + 8 * t;
        const bool valid = first + u < end && k < k_size;
        lo[u] = valid ? __ldg(reinterpret_cast<const uint4*>(row_lo + k)) : zero;
        hi[u] = valid ? __ldg(reinterpret_cast<const uint4*>(row_hi + k)) : zero;
        in[u] = valid && g < batch ? *reinterpret_cast<const uint4*>(x + k) : zero;  // no sequence: zeros
      }
#pragma unroll
      for (int u = 0; u < kMmaBlocksInFlight; ++u) {
        Mma(d, lo[u].x, hi[u].x, lo[u].y, hi[u].y, in[u].x, in[u].y);
        Mma(d, lo[u].z, hi[u].z, lo[u].w, hi[u].w, in[u].z, in[u].w);
      }
    }
    float* sums = scratch + item * 16 * kMaxBatch;  // [16 rows][8 sequences]
    sums[g * kMaxBatch + 2 * t] = d[0];
    sums[g * kMaxBatch + 2 * t + 1] = d[1];
    sums[(g + 8) * kMaxBatch + 2 * t] = d[2];
    sums[(g + 8) * kMaxBatch + 2 * t + 1] = d[3];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < rows * kMaxBatch; i += kThreads) {
    const int r = i / kMaxBatch, b = i % kMaxBatch, group = r / 16;
    if (b >= batch) continue;
    float total = 0;
    for (int part = 0; part < parts; ++part) total += scratch[((group * parts + part) * 16 + r % 16) * kMaxBatch + b];
    out[r * kMaxBatch + b] = total;
  }
  __syncthreads();
}

// The Hopper bulk-copy engine and its shared-memory barriers (PTX ISA, "cp.async.bulk" and
// "mbarrier"): a copy's completion counts its bytes against the barrier's expected count, and
// the barrier's phase flips when the arrival and all of the bytes are in.
__device__ uint32_t SharedAddress(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__device__ void BarrierInit(uint64_t* barrier) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(SharedAddress(barrier)) : "memory");
}

// The barriers' initialization visible to the bulk-copy engine (the async proxy) too.
__device__ void FenceBarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) from global memory into
// this block's shared memory; `barrier`'s phase completes when they are in.
__device__ void BulkCopy(void* destination, const void* source, uint32_t bytes, uint64_t* barrier) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SharedAddress(barrier)), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   SharedAddress(destination)),
               "l"(source), "r"(bytes), "r"(SharedAddress(barrier))
               : "memory");
}

// Until the phase of `barrier` with this parity has completed.
__device__ void WaitBarrier(uint64_t* barrier, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(SharedAddress(barrier)),
      "r"(parity)
      : "memory");
}

// Rows [row_begin, row_end) of a bf16 weight of `k` columns that an instruction multiplies.
struct Segment {
  const bf16* weights;
  int row_begin, row_end, k;
};

// The weight rows instruction `in` reads, in the order it reads them (0 to 2 segments).
__device__ int Segments(const KernelArgs& a, const DeviceInstruction& in, Segment* segments) {
  const int r0 = in.row_begin, r1 = in.row_end;
  if (in.opcode == kLogits) {
    segments[0] = {static_cast<const bf16*>(a.lm_head), r0, r1, a.dim};
    return 1;
  }
  if (in.opcode != kQkv && in.opcode != kOProj && in.opcode != kGateUp && in.opcode != kDown) return 0;
  const KernelLayer& layer = a.layers[in.layer];
  switch (in.opcode) {
    case kQkv:
      segments[0] = {static_cast<const bf16*>(layer.qkv), r0, r1, a.dim};
      return 1;
    case kOProj:
      segments[0] = {static_cast<const bf16*>(layer.o), r0, r1, a.dim};
      return 1;
    case kGateUp:
      segments[0] = {static_cast<const bf16*>(layer.gate_up), r0, r1, a.dim};
      segments[1] = {static_cast<const bf16*>(layer.gate_up), a.ffn + r0, a.ffn + r1, a.dim};
      return 2;
    default:  // kDown
      segments[0] = {static_cast<const bf16*>(layer.down), r0, r1, a.ffn};
      return 1;
  }
}

// The weight ring (KernelArgs::ring_slots > 0): the block's matrix instructions read their
// weights as a stream of chunks (whole rows, at most a slot each) in queue order. Thread 0
// requests chunks ahead, as far as the ring's free slots allow: before each instruction's wait
// (weights depend on no other block, so the next instruction's first chunks are in flight
// while the block waits for its inputs) and after every chunk the block has read. Every
// thread counts the chunks read the same way, so all know which slot and phase come next.
struct Ring {
  unsigned char* slots = nullptr;
  uint64_t* full = nullptr;  // a barrier per slot
  int num_slots = 0, slot_bytes = 0;
  uint32_t read = 0;  // chunks read so far in this launch
  // Thread 0's cursor: chunks requested, and where the next one starts.
  uint32_t requested = 0;
  int queue_position = 0, segment = 0, row = -1;  // row -1: the segment's first
  // The segments of the instruction at `looked_up` (thread 0's, so that a refill per chunk
  // does not read the instruction and its layer again).
  int looked_up = -1, num_segments = 0;
  Segment segments[2];
};

__device__ int ChunkRows(int k, int slot_bytes) { return max(1, slot_bytes / (2 * k)); }

// Thread 0: requests the next chunks while slots are free and the queue has weights left.
__device__ __noinline__ void Refill(const KernelArgs& a, Ring& ring) {
  const int queue_end = a.queue_begin[blockIdx.x + 1];
  while (ring.requested < ring.read + ring.num_slots && ring.queue_position < queue_end) {
    if (ring.looked_up != ring.queue_position) {
      ring.num_segments = Segments(a, a.instructions[a.queue[ring.queue_position]], ring.segments);
      ring.looked_up = ring.queue_position;
    }
    if (ring.segment >= ring.num_segments) {
      ++ring.queue_position;
      ring.segment = 0;
      ring.row = -1;
      continue;
    }
    const Segment& segment = ring.segments[ring.segment];
    if (ring.row < 0) ring.row = segment.row_begin;
    if (ring.row >= segment.row_end) {
      ++ring.segment;
      ring.row = -1;
      continue;
    }
    const int rows = min(ChunkRows(segment.k, ring.slot_bytes), segment.row_end - ring.row);
    const int slot = ring.requested % ring.num_slots;
    BulkCopy(ring.slots + static_cast<int64_t>(slot) * ring.slot_bytes,
             segment.weights + static_cast<int64_t>(ring.row) * segment.k, static_cast<uint32_t>(rows) * segment.k * 2,
             &ring.full[slot]);
    ++ring.requested;
    ring.row += rows;
  }
}

// One warp's sums over vectors [v_begin, v_end) of kRows rows of a ring chunk (rows past the
// chunk's last read it again; the caller does not store them), for every sequence: each lane
// over vectors lane, lane + 32, ... in increasing order, then a warp sum (every thread of the
// warp gets the totals). Each staged input read serves the kRows rows.
template <int kRows, typename Input>
__device__ void ChunkRowSums(const uint4* chunk, int vectors, int first_row, int rows, int v_begin, int v_end,
                             int batch, Input input, float (&sums)[kRows][kMaxBatch]) {
  const int lane = threadIdx.x % 32;
  const uint4* weights[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    weights[i] = chunk + static_cast<int64_t>(min(first_row + i, rows - 1)) * vectors;
#pragma unroll
    for (int b = 0; b < kMaxBatch; ++b) sums[i][b] = 0;
  }
#pragma unroll 2
  for (int v = v_begin + lane; v < v_end; v += 32) {
    uint4 raw[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) raw[i] = weights[i][v];
#pragma unroll
    for (int b = 0; b < kMaxBatch; ++b) {
      if (b < batch) {
        float x[8];
        input.Load8(b, v * 8, x);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
#pragma unroll
          for (int i = 0; i < kRows; ++i) sums[i][b] += __bfloat162float(reinterpret_cast<const bf16*>(&raw[i])[j]) * x[j];
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
#pragma unroll
    for (int b = 0; b < kMaxBatch; ++b) sums[i][b] = WarpSum(sums[i][b]);
  }
}

// A chunk's rows in groups of kRows (two where the chunk has two), each group's row range split
// into `parts` equal ranges (the most that keeps groups x parts within the warps), an item per
// warp; a group's sums go straight to `out` when unsplit, else to `partial`
// ([item][kRows][kMaxBatch]) for RingRows to add in part order.
template <int kRows, typename Input>
__device__ int ChunkItems(const uint4* chunk, int vectors, int rows, int batch, Input input, float* out,
                          float* partial) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, groups = (rows + kRows - 1) / kRows;
  int parts = 1;
  while (parts < kWarps && groups * parts * 2 <= kWarps) parts *= 2;
  const int per_part = (vectors + parts - 1) / parts;
  for (int item = warp; item < groups * parts; item += kWarps) {
    const int first = (item / parts) * kRows, part = item % parts;
    float sums[kRows][kMaxBatch];
    ChunkRowSums<kRows>(chunk, vectors, first, rows, part * per_part, min(vectors, (part + 1) * per_part), batch,
                        input, sums);
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
#pragma unroll
      for (int b = 0; b < kMaxBatch; ++b) {
        if (lane != 0 || b >= batch) continue;
        if (parts == 1) {
          if (first + i < rows) out[(first + i) * kMaxBatch + b] = sums[i][b];
        } else {
          partial[(item * kRows + i) * kMaxBatch + b] = sums[i][b];
        }
      }
    }
  }
  return parts;
}

// What MatrixRows computes, the weights read from the ring chunk by chunk (ChunkItems: two rows
// per warp where the chunk has two, each staged input read once for both). The chunking depends
// on the shapes only, so every sequence's sums run in the same order whatever the batch.
template <typename Input>
__device__ void RingRows(const KernelArgs& a, Ring& ring, const Segment& segment, int batch, Input input, float* out,
                         Shared& s) {
  const int vectors = segment.k / 8;
  for (int row = segment.row_begin; row < segment.row_end;) {
    const int rows = min(ChunkRows(segment.k, ring.slot_bytes), segment.row_end - row);
    const int slot = ring.read % ring.num_slots;
    WaitBarrier(&ring.full[slot], (ring.read / ring.num_slots) & 1);
    const uint4* chunk = reinterpret_cast<const uint4*>(ring.slots + static_cast<int64_t>(slot) * ring.slot_bytes);
    float* partial = s.partial[ring.read & 1];
    float* chunk_out = out + (row - segment.row_begin) * kMaxBatch;
    const int group_rows = rows >= 2 ? 2 : 1;
    const int parts = group_rows == 2 ? ChunkItems<2>(chunk, vectors, rows, batch, input, chunk_out, partial)
                                      : ChunkItems<1>(chunk, vectors, rows, batch, input, chunk_out, partial);
    // The slot is read (thread 0 may refill it) and the partial sums are in.
    __syncthreads();
    ++ring.read;
    if (threadIdx.x == 0) Refill(a, ring);
    if (parts > 1) {
      // `partial` is written again two chunks on, after the next chunk's barrier.
      for (int t = threadIdx.x; t < rows * kMaxBatch; t += kThreads) {
        const int r = t / kMaxBatch, b = t % kMaxBatch, group = r / group_rows, i = r % group_rows;
        if (b >= batch) continue;
        float total = 0;
        for (int part = 0; part < parts; ++part) {
          total += partial[((group * parts + part) * group_rows + i) * kMaxBatch + b];
        }
        chunk_out[r * kMaxBatch + b] = total;
      }
    }
    row += rows;
  }
  __syncthreads();
}

// On the tensor cores (KernelArgs::tensor_cores: the launch has no ring).
__device__ void SegmentRows(const KernelArgs& a, Ring&, const Segment& segment, StagedBf16Input input, float* out,
                            Shared& s) {
  MmaRows(segment.weights, segment.k, segment.row_begin, segment.row_end, a.batch, input, out, s.scores);
}

// A segment's rows for every sequence into out[(row - segment.row_begin) * kMaxBatch + b]:
// from the ring when the launch has one, else with direct loads.
template <typename Input>
__device__ void SegmentRows(const KernelArgs& a, Ring& ring, const Segment& segment, Input input, float* out,
                            Shared& s) {
  if (ring.num_slots > 0) {
    RingRows(a, ring, segment, a.batch, input, out, s);
  } else {
    MatrixRows(segment.weights, segment.k, segment.row_begin, segment.row_end, a.batch, input, out);
  }
}

// A tile's input vectors, [batch][k_size] floats, in dynamic shared memory when the launch gave
// enough (KernelArgs::staged_floats): computed once per instruction (the norm applied) instead of
// once per row, and then read from shared memory instead of L2.
// Runs `rows(x)` with x a StagedInput of `input(b, k)` when it fits (a StagedBf16Input for the
// tensor cores), else a ComputedInput.
template <typename Input, typename Rows>
__device__ void WithStagedInput(const KernelArgs& a, int k_size, Input input, Rows rows) {
  float* staged = reinterpret_cast<float*>(DynamicShared());
  if (a.staged_floats < a.batch * k_size) {
    rows(ComputedInput<Input>{input});
    return;
  }
  if (a.tensor_cores) {
    bf16* staged16 = reinterpret_cast<bf16*>(staged);
    for (int b = 0; b < a.batch; ++b) {
      for (int k = threadIdx.x; k < k_size; k += kThreads) staged16[b * k_size + k] = __float2bfloat16(input(b, k));
    }
    __syncthreads();
    rows(StagedBf16Input{staged16, k_size});
    return;
  }
  for (int b = 0; b < a.batch; ++b) {
    for (int k = threadIdx.x; k < k_size; k += kThreads) staged[b * k_size + k] = input(b, k);
  }
  __syncthreads();
  rows(StagedInput{staged, k_size});
  // MatrixRows ends with a barrier: the next instruction may overwrite `staged`.
}

// Runs `rows(x)` with x the hidden state under RMSNorm with weight `norm`: staged when it fits
// (one pass over the hidden state from L2: each thread keeps the values it summed the squares
// of and scales them once the block has the sum), else InverseRms and a ComputedInput (two
// passes, the second per row). The values and the sums' order are InverseRms's either way.
template <typename Rows>
__device__ void WithNormedHidden(const KernelArgs& a, float eps, const void* norm, Shared& s, Rows rows) {
  const int dim = a.dim;
  if (a.tensor_cores || a.staged_floats < a.batch * dim) {
    InverseRms(a, eps, s);
    WithStagedInput(a, dim,
                    [&](int b, int k) {
                      return Load(a.hidden + static_cast<int64_t>(b) * dim + k) * s.inverse_rms[b] * Weight(norm, k);
                    },
                    rows);
    return;
  }
  float* staged = reinterpret_cast<float*>(DynamicShared());
  for (int b = 0; b < a.batch; ++b) {
    float sum = 0;
#pragma unroll 4
    for (int k = threadIdx.x; k < dim; k += kThreads) {
      const float x = Load(a.hidden + static_cast<int64_t>(b) * dim + k);
      staged[b * dim + k] = x;
      sum += x * x;
    }
    sum = BlockSum(sum, s);
    if (threadIdx.x == 0) s.inverse_rms[b] = rsqrtf(sum / dim + eps);
  }
  __syncthreads();
  for (int b = 0; b < a.batch; ++b) {
    for (int k = threadIdx.x; k < dim; k += kThreads) staged[b * dim + k] = staged[b * dim + k] * s.inverse_rms[b] * Weight(norm, k);
  }
  __syncthreads();
  rows(StagedInput{staged, dim});
}

// Rows [r0, r1) of the concatenated q/k/v projection of the normalized hidden state, for every
// sequence, into the fp32 qkv scratch (attention rotates q and k and writes the cache).
__device__ void RunQkv(const KernelArgs& a, const DeviceInstruction& in, const Segment& rows, Ring& ring, Shared& s) {
  const KernelLayer& layer = a.layers[in.layer];
  const int r0 = in.row_begin, r1 = in.row_end, qkv_rows = (a.n_heads + 2 * a.n_kv_heads) * a.head_dim;
  WithNormedHidden(a, layer.attention_eps, layer.attention_norm, s,
                   [&](auto x) { SegmentRows(a, ring, rows, x, s.out, s); });
  for (int b = 0; b < a.batch; ++b) {
    for (int r = r0 + threadIdx.x; r < r1; r += kThreads) {
      a.qkv[static_cast<int64_t>(b) * qkv_rows + r] = s.out[(r - r0) * kMaxBatch + b];
    }
  }
}

// What an attention instruction of (kv group g, sequence b) works on.
struct AttentionSite {
  const float* row;  // the sequence's q/k/v scratch row
  bf16* key_cache;   // the group's [window, head_dim] rows of the sequence
  bf16* value_cache;
  int64_t position;  // the step's
};

__device__ AttentionSite Site(const KernelArgs& a, const DeviceInstruction& in) {
  const KernelLayer& layer = a.layers[in.layer];
  const int g = in.row_begin, b = in.batch_begin, hd = a.head_dim;
  const int64_t cache_base = (static_cast<int64_t>(b) * a.n_kv_heads + g) * a.window * hd;
  return {a.qkv + static_cast<int64_t>(b) * (a.n_heads + 2 * a.n_kv_heads) * hd,
          static_cast<bf16*>(layer.key_cache) + cache_base, static_cast<bf16*>(layer.value_cache) + cache_base,
          Position(a, b)};
}

// The step's key of group g (rotated) and value, rounded to bf16 as the cache holds them,
// into s.step_key and s.step_value.
__device__ void StepKeyValue(const KernelArgs& a, int g, const AttentionSite& site, Shared& s) {
  const int hd = a.head_dim, half = hd / 2;
  const float* k_in = site.row + (a.n_heads + g) * hd;
  const float* v_in = site.row + (a.n_heads + a.n_kv_heads + g) * hd;
  for (int i = threadIdx.x; i < half; i += kThreads) {
    const float c = Weight(a.rope_cos, site.position * half + i), sn = Weight(a.rope_sin, site.position * half + i);
    const float x1 = Load(k_in + i), x2 = Load(k_in + i + half);
    s.step_key[i] = __float2bfloat16(x1 * c - x2 * sn);
    s.step_key[i + half] = __float2bfloat16(x2 * c + x1 * sn);
  }
  for (int i = threadIdx.x; i < hd; i += kThreads) s.step_value[i] = __float2bfloat16(Load(v_in + i));
  __syncthreads();
}

__device__ void WriteStepKeyValue(const KernelArgs& a, const AttentionSite& site, const Shared& s) {
  for (int i = threadIdx.x; i < a.head_dim; i += kThreads) {
    site.key_cache[site.position * a.head_dim + i] = s.step_key[i];
    site.value_cache[site.position * a.head_dim + i] = s.step_value[i];
  }
}

// Query head `head`, rotated, into s.q.
__device__ void RotateQuery(const KernelArgs& a, int head, const AttentionSite& site, Shared& s) {
  const int hd = a.head_dim, half = hd / 2;
  const float* q_in = site.row + head * hd;
  for (int i = threadIdx.x; i < half; i += kThreads) {
    const float c = Weight(a.rope_cos, site.position * half + i), sn = Weight(a.rope_sin, site.position * half + i);
    const float x1 = Load(q_in + i), x2 = Load(q_in + i + half);
    s.q[i] = x1 * c - x2 * sn;
    s.q[i + half] = x2 * c + x1 * sn;
  }
  __syncthreads();
}

// s.q over positions [p0, p1) (not empty): the step's own key and value from s.step_key and
// s.step_value, the others from the cache (written by earlier steps). Every thread gets the
// largest score and the sum of exp(score - largest); s.attended gets those weights times the
// values, summed in a fixed order.
__device__ void AttendRange(const KernelArgs& a, const AttentionSite& site, int p0, int p1, float& most, float& sum,
                            Shared& s) {
  const int hd = a.head_dim, vectors = hd / 8;
  const float scale = rsqrtf(static_cast<float>(hd));
  // A 16-byte vector of a key or value row: the step's own from shared memory, others from L2.
  auto row_vector = [&](const bf16* cache, const bf16* own, int p, int v) {
    return p == site.position ? reinterpret_cast<const uint4*>(own)[v]
                              : __ldcg(reinterpret_cast<const uint4*>(cache + static_cast<int64_t>(p) * hd) + v);
  };
  // Scores: `width` lanes per position (a power of two), each over 8 of the head's dimensions,
  // summed within the lanes' group; a warp scores 32 / width positions at once.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int width = 1;
  while (width < vectors) width *= 2;
  const int v = lane % width;
  for (int first = p0 + warp * (32 / width); first < p1; first += kWarps * (32 / width)) {
    const int p = first + lane / width;
    float dot = 0;
    if (v < vectors && p < p1) {
      const uint4 raw = row_vector(site.key_cache, s.step_key, p, v);
      const bf16* k = reinterpret_cast<const bf16*>(&raw);
#pragma unroll
      for (int j = 0; j < 8; ++j) dot += s.q[v * 8 + j] * __bfloat162float(k[j]);
    }
    for (int offset = width / 2; offset > 0; offset >>= 1) dot += __shfl_xor_sync(kFullMask, dot, offset);
    if (v == 0 && p < p1) s.scores[p - p0] = dot * scale;
  }
  __syncthreads();
  most = -INFINITY;
  for (int p = threadIdx.x; p < p1 - p0; p += kThreads) most = fmaxf(most, s.scores[p]);
  most = BlockMax(most, s);
  sum = 0;
  for (int p = threadIdx.x; p < p1 - p0; p += kThreads) {
    s.scores[p] = __expf(s.scores[p] - most);
    sum += s.scores[p];
  }
  sum = BlockSum(sum, s);
  // The weighted values: a thread per 8 dimensions and every parts-th position, the parts'
  // sums then added in a fixed order.
  const int parts = kThreads / vectors;
  if (threadIdx.x < parts * vectors) {
    const int vector = threadIdx.x % vectors, part = threadIdx.x / vectors;
    float acc[8] = {};
#pragma unroll 4
    for (int p = p0 + part; p < p1; p += parts) {
      const uint4 raw = row_vector(site.value_cache, s.step_value, p, vector);
      const bf16* value = reinterpret_cast<const bf16*>(&raw);
      const float weight = s.scores[p - p0];
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j] += weight * __bfloat162float(value[j]);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) s.out[part * hd + vector * 8 + j] = acc[j];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < hd; i += kThreads) {
    float acc = 0;
    for (int part = 0; part < parts; ++part) acc += s.out[part * hd + i];
    s.attended[i] = acc;
  }
  __syncthreads();
}

// Sequence b, kv group g, unsplit: the step's key and value into the caches, then each of the
// group's query heads over positions 0..position.
__device__ void RunAttention(const KernelArgs& a, const DeviceInstruction& in, Shared& s) {
  const int g = in.row_begin, b = in.batch_begin, hd = a.head_dim, group = a.n_heads / a.n_kv_heads;
  const AttentionSite site = Site(a, in);
  StepKeyValue(a, g, site, s);
  WriteStepKeyValue(a, site, s);
  for (int head = g * group; head < (g + 1) * group; ++head) {
    RotateQuery(a, head, site, s);
    float most, sum;
    AttendRange(a, site, 0, static_cast<int>(site.position) + 1, most, sum, s);
    for (int i = threadIdx.x; i < hd; i += kThreads) {
      a.attention[static_cast<int64_t>(b) * a.n_heads * hd + head * hd + i] = s.attended[i] / sum;
    }
  }
}

// Sequence b's partials of query head `head`, part `part`: [max, sum, head_dim weighted values].
__device__ float* Partial(const KernelArgs& a, int b, int head, int part) {
  return a.attention_partials +
         ((static_cast<int64_t>(b) * a.n_heads + head) * a.attention_splits + part) * (a.head_dim + 2);
}

// Part in.part of the positions 0..position (split evenly, the last parts possibly empty):
// each of the group's query heads over it, into its partials. Reads the cache only before the
// step's position; the combine writes the step's key and value.
__device__ void RunAttentionPart(const KernelArgs& a, const DeviceInstruction& in, Shared& s) {
  const int g = in.row_begin, b = in.batch_begin, hd = a.head_dim, group = a.n_heads / a.n_kv_heads;
  const AttentionSite site = Site(a, in);
  const int visible = static_cast<int>(site.position) + 1, chunk = (visible + a.attention_splits - 1) / a.attention_splits;
  const int p0 = min(visible, in.part * chunk), p1 = min(visible, (in.part + 1) * chunk);
  if (site.position >= p0 && site.position < p1) StepKeyValue(a, g, site, s);
  for (int head = g * group; head < (g + 1) * group; ++head) {
    float* partial = Partial(a, b, head, in.part);
    if (p0 == p1) {
      for (int i = threadIdx.x; i < hd + 2; i += kThreads) partial[i] = i == 0 ? -INFINITY : 0.0f;
      continue;
    }
    RotateQuery(a, head, site, s);
    float most, sum;
    AttendRange(a, site, p0, p1, most, sum, s);
    for (int i = threadIdx.x; i < hd; i += kThreads) partial[2 + i] = s.attended[i];
    if (threadIdx.x == 0) {
      partial[0] = most;
      partial[1] = sum;
    }
  }
}

// The step's key and value into the caches; each of the group's query heads: its parts
// rescaled to the largest max score, added in part order, over the rescaled sums.
__device__ void RunAttentionCombine(const KernelArgs& a, const DeviceInstruction& in, Shared& s) {
  const int g = in.row_begin, b = in.batch_begin, hd = a.head_dim, group = a.n_heads / a.n_kv_heads;
  const AttentionSite site = Site(a, in);
  StepKeyValue(a, g, site, s);
  WriteStepKeyValue(a, site, s);
  for (int head = g * group; head < (g + 1) * group; ++head) {
    float most = -INFINITY;
    for (int part = 0; part < a.attention_splits; ++part) most = fmaxf(most, Load(Partial(a, b, head, part)));
    float sum = 0;
    for (int part = 0; part < a.attention_splits; ++part) {
      const float* partial = Partial(a, b, head, part);
      sum += Load(partial + 1) * __expf(Load(partial) - most);
    }
    for (int i = threadIdx.x; i < hd; i += kThreads) {
      float acc = 0;
      for (int part = 0; part < a.attention_splits; ++part) {
        const float* partial = Partial(a, b, head, part);
        acc += Load(partial + 2 + i) * __expf(Load(partial) - most);
      }
      a.attention[static_cast<int64_t>(b) * a.n_heads * hd + head * hd + i] = acc / sum;
    }
  }
}

__device__ void Run(const KernelArgs& a, const DeviceInstruction& in, Ring& ring, Shared& s) {
  const int r0 = in.row_begin, r1 = in.row_end, dim = a.dim;
  Segment segments[2];
  Segments(a, in, segments);
  switch (in.opcode) {
    case kEmbed:
      for (int b = 0; b < a.batch; ++b) {
        for (int r = r0 + threadIdx.x; r < r1; r += kThreads) {
          a.hidden[static_cast<int64_t>(b) * dim + r] = Weight(a.embedding, Token(a, b) * dim + r);
        }
      }
      break;
    case kQkv:
      RunQkv(a, in, segments[0], ring, s);
      break;
    case kAttention:
      RunAttention(a, in, s);
      break;
    case kAttentionPart:
      RunAttentionPart(a, in, s);
      break;
    case kAttentionCombine:
      RunAttentionCombine(a, in, s);
      break;
    case kOProj:
    case kDown: {
      const float* source = in.opcode == kOProj ? a.attention : a.activation;
      const int k_size = in.opcode == kOProj ? dim : a.ffn;
      WithStagedInput(a, k_size, [&](int b, int k) { return Load(source + static_cast<int64_t>(b) * k_size + k); },
                      [&](auto x) { SegmentRows(a, ring, segments[0], x, s.out, s); });
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
      WithNormedHidden(a, layer.ffn_eps, layer.ffn_norm, s, [&](auto x) {
        SegmentRows(a, ring, segments[0], x, s.out, s);
        SegmentRows(a, ring, segments[1], x, s.out2, s);
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
      WithNormedHidden(a, a.final_eps, a.final_norm, s, [&](auto x) { SegmentRows(a, ring, segments[0], x, s.out, s); });
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
  __shared__ uint64_t ring_full[kMaxRingSlots];
  Ring ring;
  ring.num_slots = a.ring_slots;
  ring.slot_bytes = a.ring_slot_bytes;
  ring.slots = DynamicShared() + a.ring_offset_bytes;
  ring.full = ring_full;
  ring.queue_position = a.queue_begin[blockIdx.x];
  if (threadIdx.x == 0) {
    step = a.block_steps[blockIdx.x];
    for (int i = 0; i < ring.num_slots; ++i) BarrierInit(&ring_full[i]);
    FenceBarrierInit();
  }
  __syncthreads();
  for (int q = a.queue_begin[blockIdx.x]; q < a.queue_begin[blockIdx.x + 1]; ++q) {
    const int index = a.queue[q];
    const DeviceInstruction in = a.instructions[index];
    uint64_t wait_begin = 0, start = 0;
    if (threadIdx.x == 0) {
      wait_begin = GlobalTimer();
      // The weights this block reads next are requested before it waits for its inputs.
      if (ring.num_slots > 0) Refill(a, ring);
      for (int w = 0; w < in.num_waits; ++w) {
        const uint32_t target = (step + 1) * in.wait_increments[w];
        Counter counter(a.counters[in.waits[w]]);
        while (counter.load(cuda::memory_order_acquire) < target) __nanosleep(64);
      }
      start = GlobalTimer();
    }
    __syncthreads();
    Run(a, in, ring, s);
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
  config.dynamicSmemBytes = DecodeStepDynamicBytes(args);
  config.stream = stream;
  cudaLaunchAttribute cooperative = {};
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  config.attrs = &cooperative;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, DecodeStep, args);
}

size_t DecodeStepDynamicBytes(const KernelArgs& args) {
  const int64_t staged = args.staged_floats * static_cast<int64_t>(sizeof(float));
  const int64_t ring = args.ring_slots > 0 ? args.ring_offset_bytes + int64_t{args.ring_slots} * args.ring_slot_bytes : 0;
  return static_cast<size_t>(std::max(staged, ring));
}

cudaError_t DecodeStepMaxDynamicBytes(int* bytes) {
  int device = 0, optin = 0;
  cudaFuncAttributes attributes;
  if (cudaError_t error = cudaGetDevice(&device); error != cudaSuccess) return error;
  if (cudaError_t error = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
      error != cudaSuccess) {
    return error;
  }
  if (cudaError_t error = cudaFuncGetAttributes(&attributes, DecodeStep); error != cudaSuccess) return error;
  *bytes = std::max(0, optin - static_cast<int>(attributes.sharedSizeBytes));
  return cudaSuccess;
}

cudaError_t DecodeStepBlocksPerSm(size_t dynamic_bytes, int* blocks) {
  // The function's limit is set to the most the device allows, not to this program's need:
  // programs of other shapes in the same process launch with their own sizes under it.
  int most = 0;
  if (cudaError_t error = DecodeStepMaxDynamicBytes(&most); error != cudaSuccess) return error;
  if (cudaError_t error = cudaFuncSetAttribute(DecodeStep, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
      error != cudaSuccess) {
    return error;
  }
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, DecodeStep, kThreads, dynamic_bytes);
}

}  // namespace magi::megakernel
