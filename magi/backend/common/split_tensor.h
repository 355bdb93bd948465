// Split fp32 master weights on LibTorch tensors: SplitToBf16 and JoinSplit of
// split_float.h, element by element, with ATen ops (CPU or CUDA, any shape).
//
// Bit for bit the host functions (split_tensor_test checks them against each other): the
// fp32 value's two 16-bit halves are reached through dtype views (little-endian, as every
// chip Magi runs on), so no shift or conversion can round anything.
#ifndef MAGI_BACKEND_COMMON_SPLIT_TENSOR_H_
#define MAGI_BACKEND_COMMON_SPLIT_TENSOR_H_

#include <ATen/ATen.h>

#include <utility>

namespace magi {

// {hi (bf16), lo (int16)} of an fp32 tensor, each contiguous and of its sizes. Throws
// c10::Error (as ATen does) when `value` is not fp32.
std::pair<at::Tensor, at::Tensor> SplitTensorToBf16(const at::Tensor& value);

// The fp32 tensor the halves hold (contiguous, their sizes). Throws c10::Error when `hi`
// is not bf16, `lo` not int16, or their sizes differ.
at::Tensor JoinSplitTensor(const at::Tensor& hi, const at::Tensor& lo);

}  // namespace magi

#endif  // MAGI_BACKEND_COMMON_SPLIT_TENSOR_H_
