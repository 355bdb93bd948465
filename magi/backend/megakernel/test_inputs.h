// Test helpers: the decode graphs of testdata/, random inputs for a matched graph, and random
// decode tensors for a model without a graph.
#ifndef MAGI_BACKEND_MEGAKERNEL_TEST_INPUTS_H_
#define MAGI_BACKEND_MEGAKERNEL_TEST_INPUTS_H_

#include <functional>
#include <memory>
#include <vector>

#include <ATen/ATen.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "magi/backend/megakernel/decode_model.h"
#include "magi/backend/megakernel/decode_pattern.h"
#include "magi/backend/megakernel/reference_executor.h"
#include "magi/ir/module.h"

namespace magi::megakernel::testing {

// magi/backend/megakernel/testdata/`file`, parsed.
absl::StatusOr<std::unique_ptr<Module>> LoadTestGraph(absl::string_view file);

// Seeded random inputs for every input of `graph`, on the CPU: weights 0.1 N(0, 1) (norm
// weights 1 + that), caches N(0, 1), tokens below the vocabulary, positions below the window,
// other integer inputs 0.
std::vector<at::Tensor> RandomInputs(const Graph& graph, const DecodeGraphMatch& match, uint64_t seed = 42);

// Seeded random fp32 tensors of `model`'s decode step on the CPU, drawn as RandomInputs draws
// them; the rope tables are the real cos/sin (base 10,000) over the window; eps 1e-5.
DecodeTensors RandomDecodeTensors(const DecodeModel& model, uint64_t seed = 42);

// `tensors` with `f` applied to every tensor (e.g. a copy in bf16 on the GPU).
DecodeTensors MapDecodeTensors(const DecodeTensors& tensors, const std::function<at::Tensor(const at::Tensor&)>& f);

// Copies of `tensors` (a step writes its caches in place).
std::vector<at::Tensor> Clones(const std::vector<at::Tensor>& tensors);
// max |a - b| and max |a|, in fp32.
double MaxDiff(const at::Tensor& a, const at::Tensor& b);
double MaxAbs(const at::Tensor& a);

}  // namespace magi::megakernel::testing

#endif  // MAGI_BACKEND_MEGAKERNEL_TEST_INPUTS_H_
