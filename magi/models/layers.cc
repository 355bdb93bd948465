#include "magi/models/layers.h"

namespace magi::models {

void InitNormal(at::Tensor& tensor, double std) {
  if (tensor.is_meta()) return;
  torch::NoGradGuard no_grad;
  tensor.normal_(0.0, std);
}

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, bool with_bias, const torch::TensorOptions& options) {
  weight = register_parameter("weight", torch::empty({out_features, in_features}, options));
  if (!weight.is_meta()) ResetParameter("weight", weight);
  if (with_bias) {
    bias = register_parameter("bias", torch::zeros({out_features}, options));
  }
}

void LinearImpl::ResetParameter(const std::string& name, at::Tensor& tensor) {
  torch::NoGradGuard no_grad;
  if (name == "weight") InitNormal(tensor, 0.02);
  if (name == "bias") tensor.zero_();
}

at::Tensor LinearImpl::forward(const at::Tensor& x) {
  return bias.defined() ? torch::linear(x, weight, bias) : torch::linear(x, weight);
}

EmbeddingImpl::EmbeddingImpl(int64_t num_embeddings, int64_t dim, const torch::TensorOptions& options) {
  weight = register_parameter("weight", torch::empty({num_embeddings, dim}, options));
  if (!weight.is_meta()) ResetParameter("weight", weight);
}

void EmbeddingImpl::ResetParameter(const std::string& name, at::Tensor& tensor) {
  if (name == "weight") InitNormal(tensor, 0.02);
}

at::Tensor EmbeddingImpl::forward(const at::Tensor& ids) { return torch::embedding(weight, ids); }

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_value, const torch::TensorOptions& options) : eps(eps_value) {
  weight = register_parameter("weight", torch::ones({dim}, options));
}

void RMSNormImpl::ResetParameter(const std::string& name, at::Tensor& tensor) {
  torch::NoGradGuard no_grad;
  if (name == "weight") tensor.fill_(1.0);
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) {
  at::Tensor variance = x.pow(2).mean(-1, /*keepdim=*/true);
  return x * torch::rsqrt(variance + eps) * weight;
}

}  // namespace magi::models
