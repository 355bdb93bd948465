// The MegaKernel decode step on the GPU: one persistent kernel, one block per SM, each block
// running its SM's queue of a packed instruction program (device_program.h, device_records.h) and computing each
// instruction as reference_executor.h does, with the weights and caches in bf16 and everything
// else in fp32. Blocks order themselves only through the program's counters (release: a
// fence and an atomic add after an instruction; acquire: a load of the counter before one), and
// read what other blocks wrote through L2, never a stale L1 line.
//
// The matrix instructions read their weights through a ring of shared-memory slots that the
// Hopper bulk-copy engine (TMA) fills ahead, the next instruction's weights requested before
// it waits for its inputs (KernelArgs::ring_slots; 0: plain vectorized loads). Built with
// --config=cuda.
#ifndef MAGI_BACKEND_MEGAKERNEL_DECODE_KERNEL_H_
#define MAGI_BACKEND_MEGAKERNEL_DECODE_KERNEL_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "magi/backend/megakernel/device_records.h"

namespace magi::megakernel {

// The most slots a weight ring has (a barrier each in static shared memory).
inline constexpr int kMaxRingSlots = 8;

// One layer's tensors on the device (bf16 unless said; contiguous, the shapes of decode_pattern.h).
struct KernelLayer {
  const void* attention_norm;  // [dim]
  const void* qkv;             // [(n_heads + 2 n_kv_heads) head_dim, dim]
  const void* o;               // [dim, dim]
  const void* ffn_norm;        // [dim]
  const void* gate_up;         // [2 ffn, dim]
  const void* down;            // [dim, ffn]
  void* key_cache;             // [batch, n_kv_heads, window, head_dim]
  void* value_cache;
  float attention_eps, ffn_eps;
};

struct KernelArgs {
  // Shapes (DecodeModel's).
  int32_t batch, dim, n_heads, n_kv_heads, head_dim, ffn, vocab, window;
  // Inputs.
  const int64_t* tokens;     // [batch]
  const int64_t* positions;  // [batch]
  const void* rope_cos;      // bf16 [positions, head_dim / 2]
  const void* rope_sin;
  const void* embedding;     // bf16 [vocab, dim]
  const void* final_norm;    // bf16 [dim]
  const void* lm_head;       // bf16 [vocab, dim]
  float final_eps;
  const KernelLayer* layers;  // device array of n_layers
  // Scratch, fp32, [batch, rows]: hidden (dim), qkv, attention (dim), activation (ffn), logits (vocab).
  float* hidden;
  float* qkv;
  float* attention;
  float* activation;
  float* logits;
  // attention_part's results, [batch, n_heads, attention_splits, head_dim + 2] (max score, sum of
  // exponentials, weighted values); unused when attention_splits is 1.
  float* attention_partials;
  int32_t attention_splits;
  int64_t* next_token;  // [batch]: the output
  // The program (device copies of a DeviceProgram), its counters and one step count per block
  // (all zeroed once). Counters only grow: a wait in step s is for (s + 1) times the counter's
  // increments per step, s being the block's own count of the steps it ran, kept in device
  // memory (not a launch argument) so that a CUDA graph replaying the launch advances it.
  const DeviceInstruction* instructions;
  const int32_t* queue_begin;
  const int32_t* queue;
  uint32_t* counters;
  uint32_t* block_steps;  // [num_sms]
  // Each instruction's global timer (ns) before its waits, after them and after its signals,
  // [num_instructions][3], rewritten every step (program_timeline.h reads the last one).
  uint64_t* timeline;
  // Floats of dynamic shared memory the launch gives for staging a tile's input vectors
  // (batch x the matrix's width; 0: read them from L2 for every row).
  int32_t staged_floats;
  // The weight ring: `ring_slots` (0: none, else 2..kMaxRingSlots) slots of `ring_slot_bytes`
  // (a multiple of 128, at least a row of the widest matrix) in dynamic shared memory from
  // `ring_offset_bytes` (past the staged inputs, a multiple of 128). The weights must be
  // 16-byte aligned (the bulk copies' and the vector loads' unit).
  int32_t ring_slots, ring_slot_bytes, ring_offset_bytes;
  // 1: the matrix tiles multiply on the tensor cores, their inputs staged in bf16 (needs
  // staged_floats for the widest matrix and no ring).
  int32_t tensor_cores;
};

// Launches the step on `num_sms` blocks (the program's SM count) as a cooperative launch, so
// that every block is resident (capturable into a CUDA graph); the launch's error, if any.
// A position outside [0, window) or a token outside [0, vocab) is clamped into it (a bad input
// must not write outside the caches); the caller keeps positions in range, as the graph's index_put requires.
cudaError_t LaunchDecodeStep(const KernelArgs& args, int num_sms, cudaStream_t stream);

// The dynamic shared memory a launch with `args` takes: the staged inputs, then the ring.
size_t DecodeStepDynamicBytes(const KernelArgs& args);

// Raises the kernel's dynamic shared memory limit to the device's most, then: how many blocks
// of it, with `dynamic_bytes` of dynamic shared memory, one SM of the current device keeps
// resident (a cooperative launch needs at least 1).
cudaError_t DecodeStepBlocksPerSm(size_t dynamic_bytes, int* blocks);

// The most bytes of dynamic shared memory a block of the kernel can have on the current device.
cudaError_t DecodeStepMaxDynamicBytes(int* bytes);

}  // namespace magi::megakernel

#endif  // MAGI_BACKEND_MEGAKERNEL_DECODE_KERNEL_H_
