// One flat buffer per collective: how the Gloo communicator moves all of a collective's
// tensors with one Gloo call.
//
// A Magi collective carries a list of tensors (a layer's parameters, or a bucket of
// several layers'). One Gloo call per tensor costs a round of thread hand-offs and TCP
// messages each, which on a few shared cores is most of a collective's time (the tiny
// step's 9-tensor reduce-scatter took 14-16 ms for 130 KB). So the inputs are copied into
// one contiguous buffer, the buffer is reduced or gathered once, and the results are
// copied out into tensors of their own, as PyTorch FSDP2 does with its flat all-gather
// buffer (each result its own storage, as the IR and the memory planner have it).
//
// Layout: the buffer is `chunks` equal chunks; chunk r holds rows [r*d0/chunks,
// (r+1)*d0/chunks) of every input in input order (all-reduce: chunks = 1; reduce-scatter:
// chunks = world, so rank r's result is chunk r; all-gather: every rank packs its own
// input with chunks = 1 and the gathered buffer is the ranks' buffers one after another).
#ifndef MAGI_RUNTIME_GLOO_COLLECTIVE_PACKING_H_
#define MAGI_RUNTIME_GLOO_COLLECTIVE_PACKING_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace magi {

// Indices of `inputs` grouped by dtype, groups in the order their dtype first appears
// (the same on every rank, as the inputs' types are). A reduction runs once per group.
std::vector<std::vector<size_t>> GroupByDtype(const std::vector<at::Tensor>& inputs);

// Copies inputs[members] into one contiguous CPU tensor of `buffer_dtype` laid out in
// `chunks` chunks (above). Fails, naming the input, when an input is not on the CPU, has
// no dimension 0 while chunks > 1, has a dimension 0 that `chunks` does not divide, or when
// the bytes do not fill whole `buffer_dtype` elements.
absl::StatusOr<at::Tensor> PackChunked(const std::vector<at::Tensor>& inputs, const std::vector<size_t>& members,
                                       int64_t chunks, at::ScalarType buffer_dtype);

// The results of a reduction of a PackChunked buffer: for each of inputs[members] a new
// tensor with chunk `chunk`'s rows of it (dimension 0 divided by `chunks`).
std::vector<at::Tensor> UnpackChunk(const at::Tensor& packed, const std::vector<at::Tensor>& inputs,
                                    const std::vector<size_t>& members, int64_t chunks, int64_t chunk);

// The results of an all-gather of every rank's PackChunked(inputs, all, 1, kByte): for each
// input a new tensor of `world` times its rows, rank r's rows r-th.
std::vector<at::Tensor> UnpackGathered(const at::Tensor& gathered, const std::vector<at::Tensor>& inputs,
                                       int64_t world);

}  // namespace magi

#endif  // MAGI_RUNTIME_GLOO_COLLECTIVE_PACKING_H_
