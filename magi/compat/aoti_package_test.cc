// AotiPackage on the CPU: an MLP forward traced by make_fx, compiled by AOTInductor at
// build time (//magi/compat:aoti_mlp, PyTorch 2.11+), loaded and run from C++ and
// compared with PyTorch's eager result; and every failure as a Status. On LibTorch 1.13
// (no AOTInductor) only the Unavailable path is tested.
#include "magi/compat/aoti_package.h"

#include <torch/torch.h>

#include <fstream>
#include <iostream>
#include <iterator>

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/compat/torch_compat.h"

namespace magi::compat {
namespace {

constexpr char kPackage[] = "magi/compat/aoti_mlp/mlp.pt2";

#if TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR >= 211

struct MlpData {
  std::vector<at::Tensor> inputs;
  std::vector<at::Tensor> expected;
};

// The inputs and eager outputs make_aoti_mlp.py saved with torch.save.
MlpData ReadMlpData() {
  std::ifstream in("magi/compat/aoti_mlp/mlp_io.pt", std::ios::binary);
  EXPECT_TRUE(in.good());
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  c10::Dict<c10::IValue, c10::IValue> saved = torch::pickle_load(bytes).toGenericDict();
  c10::IValue inputs = saved.at("inputs"), expected = saved.at("expected");  // own the lists iterated below
  MlpData data;
  for (const c10::IValue& t : inputs.toListRef()) data.inputs.push_back(t.toTensor());
  for (const c10::IValue& t : expected.toListRef()) data.expected.push_back(t.toTensor());
  return data;
}

TensorType Type(DType dtype, std::vector<int64_t> sizes) {
  TensorType type;
  type.dtype = dtype;
  type.sizes = std::move(sizes);
  return type;
}

// 0.weight, 0.bias, 2.weight, 2.bias, input.0 (make_aoti_mlp.py: parameters first).
std::vector<TensorType> MlpInputTypes() {
  return {Type(DType::kFloat32, {32, 16}), Type(DType::kFloat32, {32}), Type(DType::kFloat32, {8, 32}),
          Type(DType::kFloat32, {8}), Type(DType::kFloat32, {4, 16})};
}

TEST(AotiPackageTest, RunsTheCompiledMlpLikeEager) {
  ASSERT_TRUE(AotInductorAvailable());
  MlpData data = ReadMlpData();
  ASSERT_EQ(data.inputs.size(), 5u);
  AotiOptions options;
  options.input_types = MlpInputTypes();
  absl::StatusOr<std::unique_ptr<AotiPackage>> package = AotiPackage::Load(kPackage, options);
  ASSERT_TRUE(package.ok()) << package.status();
  EXPECT_EQ((*package)->metadata().at("magi.graph"), "mlp_forward");
  absl::StatusOr<std::vector<at::Tensor>> outputs = (*package)->Run(data.inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  ASSERT_EQ(outputs->size(), 1u);
  const at::Tensor& got = (*outputs)[0];
  ASSERT_EQ(got.sizes(), data.expected[0].sizes());
  double diff = (got - data.expected[0]).abs().max().item<double>();
  std::cout << "AOTInductor CPU package (AOTI_CPU_ISA " << (*package)->metadata().at("AOTI_CPU_ISA")
            << ") vs eager (LibTorch " << TORCH_VERSION << "): max |diff| " << diff << std::endl;
  // Vectorized code (see make_aoti_mlp.py: Inductor's own probe would fail in that process).
  EXPECT_NE((*package)->metadata().at("AOTI_CPU_ISA"), "INVALID_VEC_ISA");
  // Inductor fuses and vectorizes GELU and the bias adds: not bitwise, within float rounding.
  EXPECT_LE(diff, 1e-5);
  // Run again with the single-threaded runner (the CUDA-graph mode) on the same package.
  options.run_single_threaded = true;
  absl::StatusOr<std::unique_ptr<AotiPackage>> single = AotiPackage::Load(kPackage, options);
  ASSERT_TRUE(single.ok()) << single.status();
  absl::StatusOr<std::vector<at::Tensor>> again = (*single)->Run(data.inputs);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(at::equal((*again)[0], got));
}

TEST(AotiPackageTest, MissingAndBrokenPackagesAreStatuses) {
  absl::StatusOr<std::unique_ptr<AotiPackage>> missing = AotiPackage::Load("magi/compat/aoti_mlp/none.pt2");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "no AOTInductor package at magi/compat/aoti_mlp/none.pt2");
  // A file that is not a zip archive: LibTorch throws c10::Error, we return a Status.
  absl::StatusOr<std::unique_ptr<AotiPackage>> broken = AotiPackage::Load("magi/compat/aoti_mlp/mlp_io.pt");
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(broken.status().message().find("cannot load AOTInductor package magi/compat/aoti_mlp/mlp_io.pt"),
            std::string::npos)
      << broken.status();
  AotiOptions other;
  other.model_name = "other";
  absl::StatusOr<std::unique_ptr<AotiPackage>> no_model = AotiPackage::Load(kPackage, other);
  EXPECT_EQ(no_model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_model.status().message().find("(model 'other')"), std::string::npos) << no_model.status();
}

TEST(AotiPackageTest, WrongInputsAreRejectedBeforeTheyRun) {
  MlpData data = ReadMlpData();
  AotiOptions options;
  options.input_types = MlpInputTypes();
  absl::StatusOr<std::unique_ptr<AotiPackage>> package = AotiPackage::Load(kPackage, options);
  ASSERT_TRUE(package.ok()) << package.status();
  // Without the check the generated code would read a [32,17] weight as [32,16] and
  // return wrong numbers without a word (seen with 2.12).
  std::vector<at::Tensor> wrong_size = data.inputs;
  wrong_size[0] = at::zeros({32, 17});
  EXPECT_EQ((*package)->Run(wrong_size).status(),
            absl::InvalidArgumentError(
                "magi/compat/aoti_mlp/mlp.pt2: input 0 is f32[32,17] but the package was compiled for f32[32,16]"));
  std::vector<at::Tensor> wrong_dtype = data.inputs;
  wrong_dtype[4] = wrong_dtype[4].to(at::kDouble);
  EXPECT_EQ((*package)->Run(wrong_dtype).status(),
            absl::InvalidArgumentError(
                "magi/compat/aoti_mlp/mlp.pt2: input 4 is f64[4,16] but the package was compiled for f32[4,16]"));
  // A transposed weight would be read as if contiguous (seen with 2.12: 0.6 off, no error).
  std::vector<at::Tensor> transposed = data.inputs;
  transposed[0] = at::zeros({16, 32}).t();
  EXPECT_EQ((*package)->Run(transposed).status(),
            absl::InvalidArgumentError("magi/compat/aoti_mlp/mlp.pt2: input 0 is f32[32,16]strides[1,32] but the "
                                       "package was compiled for f32[32,16]"));
  // A dimension of size 1 is never stepped over, so its stride passes the check (and the
  // package's own count check then fails: it wants 5 inputs).
  AotiOptions row_options;
  row_options.input_types = {Type(DType::kFloat32, {1, 16})};
  absl::StatusOr<std::unique_ptr<AotiPackage>> row_package = AotiPackage::Load(kPackage, row_options);
  ASSERT_TRUE(row_package.ok()) << row_package.status();
  absl::Status odd_stride = (*row_package)->Run({at::zeros({16}).as_strided({1, 16}, {7, 1})}).status();
  EXPECT_EQ(odd_stride.code(), absl::StatusCode::kInternal) << odd_stride;
  EXPECT_EQ((*package)->Run({data.inputs[0]}).status(),
            absl::InvalidArgumentError("magi/compat/aoti_mlp/mlp.pt2: expected 5 inputs, got 1"));
  // Without input_types the package's own count check still becomes a Status.
  absl::StatusOr<std::unique_ptr<AotiPackage>> unchecked = AotiPackage::Load(kPackage);
  ASSERT_TRUE(unchecked.ok()) << unchecked.status();
  absl::Status count = (*unchecked)->Run({data.inputs[0]}).status();
  EXPECT_EQ(count.code(), absl::StatusCode::kInternal);
  EXPECT_NE(count.message().find("expected inputs vector size to be 5, but got 1"), std::string::npos) << count;
}

#else  // LibTorch 1.13

TEST(AotiPackageTest, UnavailableBefore211) {
  EXPECT_FALSE(AotInductorAvailable());
  absl::StatusOr<std::unique_ptr<AotiPackage>> package = AotiPackage::Load(kPackage);
  EXPECT_EQ(package.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(package.status().message().find("has no AOTInductor"), std::string::npos) << package.status();
}

#endif

}  // namespace
}  // namespace magi::compat
