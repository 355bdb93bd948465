// Index arguments that LibTorch's CPU kernels read or write through without checking them,
// validated before the call.
//
// Most ATen kernels that take index tensors check them (index_select, gather, scatter,
// index_put, nll_loss, ...). A few do not: given an index out of range, or an index tensor
// shorter than the tensor it goes with, they read or write memory they do not own (the
// result changes from run to run, or the process dies), or silently drop the index.
// tools/aten_index_probe.py finds them by experiment (LibTorch 1.13 and 2.12, CPU; the
// table it prints is in docs/fx.md). For exactly those ops this file holds one check each,
// in one table: embedding_dense_backward; _embedding_bag / _embedding_bag_forward_only
// (offsets); _embedding_bag_backward, _embedding_bag_dense_backward and
// _embedding_bag_per_sample_weights_backward (indices, offsets, offset2bag, bag_size);
// max_pool{2,3}d_with_indices_backward and adaptive_max_pool{2,3}d_backward (indices);
// _ctc_loss and _ctc_loss_backward (targets, input/target lengths, log_alpha);
// segment_reduce and _segment_reduce_backward (lengths, offsets); _pad_packed_sequence and
// _pack_padded_sequence_backward (batch_sizes); embedding_renorm_ (indices).
//
// Executors built on StepPlan call it through CallOperator (step_plan.h): the plan looks
// the op up once, so ops without a check cost one null test per call.
//
//   IndexCheck check = FindIndexCheck("aten::_embedding_bag_dense_backward");
//   absl::Status ok = RunIndexCheck(check, op.schema(), stack);  // InvalidArgument naming
//                                                                // argument, value, position
//
// What it does NOT do: check tensors that are not on the CPU (the table is of CPU kernels,
// and reading a CUDA index tensor would synchronize the stream), check index arguments of
// kernels that already check them, or check anything but indices and the sizes they must
// agree with (dtypes, and every other misuse, are the kernel's to reject).
#ifndef MAGI_BACKEND_COMMON_INDEX_CHECKS_H_
#define MAGI_BACKEND_COMMON_INDEX_CHECKS_H_

#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace magi {

class IndexArgs;

// Validates the index arguments of one op; InvalidArgument saying which argument holds
// which value at which position and what range it must lie in.
using IndexCheck = absl::Status (*)(const IndexArgs& args);

// The check of `op` ("aten::name" or "aten::name.overload"; every overload of a name shares
// it), or nullptr when its CPU kernel needs none.
IndexCheck FindIndexCheck(absl::string_view op);

// Runs `check` on the schema-ordered arguments `stack` of `schema` (as CallOperator pushes
// them). Never throws.
absl::Status RunIndexCheck(IndexCheck check, const c10::FunctionSchema& schema, const torch::jit::Stack& stack);

// The op names that have a check ("aten::embedding_dense_backward", ...), sorted.
std::vector<std::string> IndexCheckedOps();

}  // namespace magi

#endif  // MAGI_BACKEND_COMMON_INDEX_CHECKS_H_
