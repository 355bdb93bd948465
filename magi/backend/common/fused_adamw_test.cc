// The multi-tensor AdamW kernel against LibTorch's op-by-op AdamW (AdamWReference) on the
// GPU: many tensors (several launches), odd sizes, unaligned views, in and out of place,
// fp32 and bf16 gradients, plain and split (magi::adamw_split) parameters.
#include <ATen/cuda/CUDAContext.h>
#include <torch/torch.h>

#include "gtest/gtest.h"
#include "magi/backend/common/fused_adamw.h"
#include "magi/backend/common/split_tensor.h"
#include "magi/backend/common/step_plan.h"

namespace magi {
namespace {

// The plain kernel's update of a split variant's joined master (in place on copies).
struct PlainRun {
  at::Tensor p, m, v, grad;
};

TEST(FusedAdamWTest, MatchesTheOpByOpUpdate) {
  ASSERT_TRUE(torch::cuda::is_available());
  torch::manual_seed(3);
  auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat);
  std::vector<int64_t> sizes = {1, 3, 4, 5, 1023, 32768, 32769, 100003, 7};
  for (int i = 0; i < 40; ++i) sizes.push_back(17 * i + 1);  // more tensors than one launch takes
  sizes.push_back(0);
  at::Tensor decay = torch::full({}, 1.0 - 1e-3 * 0.01, options);
  at::Tensor step_size = torch::full({}, 1e-3 / (1 - 0.9 * 0.9), options);
  at::Tensor bc2 = torch::full({}, std::sqrt(1 - 0.999 * 0.999), options);
  AdamWConstants constants;
  // bf16 gradients (a deferred gradient cast): compared with the update from their exact
  // fp32 widening; every third one unaligned as well.
  // Split parameters (variants 3 and 4): compared through their joined value.
  for (int variant = 0; variant < 5; ++variant) {
    const bool in_place = variant == 1 || variant == 4;
    const bool bf16_grad = variant == 2 || variant == 4;
    const bool split = variant >= 3;
    std::vector<cuda::AdamWTensor> tensors;
    std::vector<std::vector<at::Tensor>> expected, outputs;
    std::vector<at::Tensor> keep;
    std::vector<std::pair<at::Tensor, at::Tensor>> split_halves;  // the split outputs (hi', lo')
    std::vector<cuda::AdamWTensor> plain_tensors;                 // split variants: the plain kernel's run
    std::vector<PlainRun> plain_runs;
    for (size_t k = 0; k < sizes.size(); ++k) {
      // Every third tensor is a view one element into its storage: not 16-byte aligned.
      int64_t offset = k % 3 == 0 ? 1 : 0;
      auto make = [&](double scale) {
        at::Tensor base = torch::randn({sizes[k] + offset}, options) * scale;
        keep.push_back(base);
        return base.narrow(0, offset, sizes[k]);
      };
      at::Tensor p = make(1), g = make(1e-2), m = make(1e-3);
      at::Tensor v = make(1e-4);
      v.abs_();
      at::Tensor g_bf16;
      if (bf16_grad) {
        at::Tensor base = (torch::randn({sizes[k] + offset}, options) * 1e-2).to(torch::kBFloat16);
        keep.push_back(base);
        g_bf16 = base.narrow(0, offset, sizes[k]);
        g = g_bf16.to(torch::kFloat);
      }
      at::Tensor hi, lo;
      if (split) {
        // Halves at the same offset into storages of their own (unaligned alike).
        auto halves = SplitTensorToBf16(p);
        at::Tensor hi_base = torch::empty({sizes[k] + offset}, options.dtype(torch::kBFloat16));
        at::Tensor lo_base = torch::empty({sizes[k] + offset}, options.dtype(torch::kShort));
        keep.push_back(hi_base);
        keep.push_back(lo_base);
        hi = hi_base.narrow(0, offset, sizes[k]).copy_(halves.first);
        lo = lo_base.narrow(0, offset, sizes[k]).copy_(halves.second);
        p = JoinSplitTensor(hi, lo);  // the master the halves hold
      }
      expected.push_back(AdamWReference(p, g, m, v, decay, step_size, bc2, constants));
      if (split) {
        // The plain kernel on copies of the joined master and moments: what split mode must equal.
        PlainRun plain{p.clone(), m.clone(), v.clone(), g_bf16.defined() ? g_bf16 : g};
        plain_tensors.push_back({plain.p.data_ptr<float>(), bf16_grad ? nullptr : g.data_ptr<float>(),
                                 plain.m.data_ptr<float>(), plain.v.data_ptr<float>(), plain.p.data_ptr<float>(),
                                 plain.m.data_ptr<float>(), plain.v.data_ptr<float>(), sizes[k]});
        if (bf16_grad) plain_tensors.back().grad_bf16 = static_cast<const uint16_t*>(g_bf16.data_ptr());
        plain_runs.push_back(std::move(plain));
      }
      std::vector<at::Tensor> out = in_place ? std::vector<at::Tensor>{split ? hi : p, m, v}
                                             : std::vector<at::Tensor>{torch::empty_like(split ? hi : p),
                                                                       torch::empty_like(m), torch::empty_like(v)};
      at::Tensor lo_out = !split ? at::Tensor() : in_place ? lo : torch::empty_like(lo);
      tensors.push_back({split ? nullptr : p.data_ptr<float>(), bf16_grad ? nullptr : g.data_ptr<float>(),
                         m.data_ptr<float>(), v.data_ptr<float>(), split ? nullptr : out[0].data_ptr<float>(),
                         out[1].data_ptr<float>(), out[2].data_ptr<float>(), sizes[k]});
      if (bf16_grad) tensors.back().grad_bf16 = static_cast<const uint16_t*>(g_bf16.data_ptr());
      if (split) {
        tensors.back().param_hi = static_cast<const uint16_t*>(hi.data_ptr());
        tensors.back().param_lo = static_cast<const uint16_t*>(lo.data_ptr());
        tensors.back().param_hi_out = static_cast<uint16_t*>(out[0].data_ptr());
        tensors.back().param_lo_out = static_cast<uint16_t*>(lo_out.data_ptr());
        split_halves.push_back({out[0], lo_out});
      }
      outputs.push_back(out);
    }
    cuda::AdamWScalars scalars{decay.data_ptr<float>(), step_size.data_ptr<float>(), bc2.data_ptr<float>(), 0.9f,
                               0.999f, 1e-8f, static_cast<float>(1.0 - 0.9), static_cast<float>(1.0 - 0.999)};
    if (split) {
      ASSERT_EQ(cuda::LaunchMultiTensorAdamW(plain_tensors.data(), static_cast<int>(plain_tensors.size()), scalars,
                                             at::cuda::getCurrentCUDAStream().stream()),
                cudaSuccess);
    }
    ASSERT_EQ(cuda::LaunchMultiTensorAdamW(tensors.data(), static_cast<int>(tensors.size()), scalars,
                                           at::cuda::getCurrentCUDAStream().stream()),
              cudaSuccess);
    for (size_t k = 0; k < sizes.size(); ++k) {
      if (split) {
        // The kernel's halves are the split of one fp32 value (hi its bf16 cast), and that
        // value is bit for bit the plain kernel's update of the joined master.
        const auto& [hi_out, lo_out] = split_halves[k];
        at::Tensor joined = JoinSplitTensor(hi_out, lo_out);
        auto resplit = SplitTensorToBf16(joined);
        EXPECT_TRUE(torch::equal(resplit.first.view(torch::kShort), hi_out.view(torch::kShort))) << "tensor " << k;
        EXPECT_TRUE(torch::equal(resplit.second, lo_out)) << "tensor " << k;
        if (sizes[k] > 0) {
          const PlainRun& plain = plain_runs[k];
          auto want = SplitTensorToBf16(plain.p);
          EXPECT_TRUE(torch::equal(want.first.view(torch::kShort), hi_out.view(torch::kShort))) << "tensor " << k;
          EXPECT_TRUE(torch::equal(want.second, lo_out)) << "tensor " << k;
          EXPECT_TRUE(torch::equal(plain.m, outputs[k][1])) << "tensor " << k;
          EXPECT_TRUE(torch::equal(plain.v, outputs[k][2])) << "tensor " << k;
        }
        outputs[k][0] = joined;
      }
      for (int j = 0; j < 3; ++j) {
        if (sizes[k] == 0) continue;
        double diff = (outputs[k][j] - expected[k][j]).abs().max().item<double>();
        double scale = expected[k][j].abs().max().item<double>() + 1e-30;
        EXPECT_LE(diff / scale, 1e-6) << "tensor " << k << " (" << sizes[k] << " elements) output " << j
                                      << (in_place ? " in place" : "") << (bf16_grad ? " bf16 gradient" : "")
                                      << (split ? " split parameter" : "");
      }
    }
  }
}

TEST(FusedAdamWTest, HalfASplitParameterIsRefused) {
  ASSERT_TRUE(torch::cuda::is_available());
  auto options = torch::TensorOptions().device(torch::kCUDA);
  at::Tensor m = torch::zeros({8}, options), v = torch::zeros({8}, options), g = torch::zeros({8}, options);
  at::Tensor hi = torch::zeros({8}, options.dtype(torch::kBFloat16));
  at::Tensor scalar = torch::ones({}, options);
  cuda::AdamWTensor tensor{nullptr, g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), nullptr,
                           m.data_ptr<float>(), v.data_ptr<float>(), 8};
  tensor.param_hi = static_cast<const uint16_t*>(hi.data_ptr());  // no lo, no outputs
  cuda::AdamWScalars scalars{scalar.data_ptr<float>(), scalar.data_ptr<float>(), scalar.data_ptr<float>(), 0.9f,
                             0.999f, 1e-8f, 0.1f, 0.001f};
  EXPECT_EQ(cuda::LaunchMultiTensorAdamW(&tensor, 1, scalars, at::cuda::getCurrentCUDAStream().stream()),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace magi
