#include "magi/backend/megakernel/decode_model.h"

#include "absl/strings/str_cat.h"

namespace magi::megakernel {

int64_t DecodeModel::weight_bytes() const {
  const int64_t per_layer = qkv_rows() * dim + dim * n_heads * head_dim + 3 * ffn_hidden * dim + 2 * dim;
  return (n_layers * per_layer + vocab * dim + dim) * weight_bytes_per_element;
}

absl::Status DecodeModel::Validate() const {
  const std::pair<const char*, int64_t> positive[] = {
      {"batch", batch},       {"dim", dim},           {"n_layers", n_layers}, {"n_heads", n_heads},
      {"n_kv_heads", n_kv_heads}, {"head_dim", head_dim}, {"ffn_hidden", ffn_hidden}, {"vocab", vocab},
      {"window", window},     {"weight_bytes_per_element", weight_bytes_per_element}};
  for (const auto& [name, value] : positive) {
    if (value <= 0) return absl::InvalidArgumentError(absl::StrCat("decode model: ", name, " is ", value, ", not positive"));
  }
  if (n_heads % n_kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode model: n_kv_heads ", n_kv_heads, " does not divide n_heads ", n_heads));
  }
  if (head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("decode model: head_dim ", head_dim, " is odd (RoPE rotates halves)"));
  }
  if (dim != n_heads * head_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode model: dim ", dim, " is not n_heads x head_dim = ", n_heads * head_dim));
  }
  return absl::OkStatus();
}

}  // namespace magi::megakernel
