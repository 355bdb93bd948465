#include "magi/backend/common/index_checks.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "magi/base/status_macros.h"
#include "magi/compat/torch_compat.h"
#include "magi/compat/torch_status.h"

namespace magi {

// Named access to the schema-ordered arguments of one call. Nothing here throws: a
// missing or mistyped argument is an Internal error (the table and LibTorch's schema
// disagree), anything LibTorch would reject for other reasons is left to the kernel.
class IndexArgs {
 public:
  IndexArgs(const c10::FunctionSchema& schema, const torch::jit::Stack& stack) : schema_(schema), stack_(stack) {}

  // The tensor argument `name`; undefined for None.
  absl::StatusOr<at::Tensor> Tensor(absl::string_view name) const {
    MAGI_ASSIGN_OR_RETURN(const c10::IValue* value, Find(name));
    if (value->isNone()) return at::Tensor();
    if (!value->isTensor()) return Mistyped(name, "a tensor");
    return value->toTensor();
  }

  absl::StatusOr<int64_t> Int(absl::string_view name) const {
    MAGI_ASSIGN_OR_RETURN(const c10::IValue* value, Find(name));
    absl::StatusOr<int64_t> v = compat::ToInt(*value);
    if (!v.ok()) return Mistyped(name, "an int");
    return *v;
  }

  absl::StatusOr<bool> Bool(absl::string_view name) const {
    MAGI_ASSIGN_OR_RETURN(const c10::IValue* value, Find(name));
    if (!value->isBool()) return Mistyped(name, "a bool");
    return value->toBool();
  }

  // An int[] argument, or the 1-D integer CPU tensor the .Tensor overloads take instead.
  absl::StatusOr<std::vector<int64_t>> Ints(absl::string_view name) const {
    MAGI_ASSIGN_OR_RETURN(const c10::IValue* value, Find(name));
    if (value->isTensor()) {
      const at::Tensor& t = value->toTensor();
      if (!t.defined() || !t.device().is_cpu() || !at::isIntegralType(t.scalar_type(), /*includeBool=*/false)) {
        return Mistyped(name, "an integer CPU tensor");
      }
      at::Tensor longs = t.to(at::kLong).contiguous();
      const int64_t* data = longs.data_ptr<int64_t>();
      return std::vector<int64_t>(data, data + longs.numel());
    }
    absl::StatusOr<std::vector<int64_t>> ints = compat::ToIntList(*value);
    if (!ints.ok()) return Mistyped(name, "an int[]");
    return *ints;
  }

  // Size `dim` (negative counts from the end) of the tensor argument `name`.
  absl::StatusOr<int64_t> Size(absl::string_view name, int64_t dim) const {
    MAGI_ASSIGN_OR_RETURN(at::Tensor t, Tensor(name));
    const int64_t rank = t.defined() ? t.dim() : 0;
    const int64_t d = dim < 0 ? dim + rank : dim;
    if (d < 0 || d >= rank) {
      return absl::InvalidArgumentError(absl::StrCat("argument '", name, "' has ", rank,
                                                     " dimensions; its dimension ", dim, " is needed"));
    }
    return t.size(d);
  }

 private:
  absl::StatusOr<const c10::IValue*> Find(absl::string_view name) const {
    const std::vector<c10::Argument>& arguments = schema_.arguments();
    for (size_t i = 0; i < arguments.size() && i < stack_.size(); ++i) {
      if (arguments[i].name() == name) return &stack_[i];
    }
    return absl::InternalError(absl::StrCat("the index check of ", schema_.name(), " reads argument '", name,
                                            "', which this LibTorch's schema lacks"));
  }

  absl::Status Mistyped(absl::string_view name, absl::string_view expected) const {
    return absl::InternalError(
        absl::StrCat("the index check of ", schema_.name(), " expects argument '", name, "' to be ", expected));
  }

  const c10::FunctionSchema& schema_;
  const torch::jit::Stack& stack_;
};

namespace {

constexpr int kMean = 1, kMax = 2;  // embedding bag modes (0 is sum)

std::string Position(const at::Tensor& t, int64_t flat) {
  std::vector<int64_t> index(t.dim(), 0);
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    index[d] = flat % std::max<int64_t>(t.size(d), 1);
    flat /= std::max<int64_t>(t.size(d), 1);
  }
  return absl::StrCat("[", absl::StrJoin(index, ", "), "]");
}

// The values of index tensor `name` as contiguous int64 on the CPU; nullopt when there is
// nothing to check here (None, not on the CPU, not an integer tensor).
absl::StatusOr<std::optional<at::Tensor>> Values(const IndexArgs& a, absl::string_view name) {
  MAGI_ASSIGN_OR_RETURN(at::Tensor t, a.Tensor(name));
  if (!t.defined() || !t.device().is_cpu() || !at::isIntegralType(t.scalar_type(), /*includeBool=*/false)) {
    return std::optional<at::Tensor>();
  }
  return std::optional<at::Tensor>(t.scalar_type() == at::kLong ? t.contiguous() : t.to(at::kLong).contiguous());
}

std::string Range(int64_t lo, int64_t hi) { return absl::StrCat("[", lo, ", ", hi, ")"); }

absl::Status OutOfRange(absl::string_view name, const at::Tensor& t, int64_t flat, int64_t value, int64_t lo,
                        int64_t hi, absl::string_view bound) {
  return absl::InvalidArgumentError(absl::StrCat("index argument '", name, "' holds ", value, " at ",
                                                 Position(t, flat), ", outside ", Range(lo, hi), " (", bound, ")"));
}

// Every element of index tensor `name` lies in [lo, hi); `bound` says what hi is.
absl::Status InRange(const IndexArgs& a, absl::string_view name, int64_t lo, int64_t hi, absl::string_view bound) {
  MAGI_ASSIGN_OR_RETURN(std::optional<at::Tensor> values, Values(a, name));
  if (!values) return absl::OkStatus();
  const int64_t* data = values->data_ptr<int64_t>();
  const int64_t n = values->numel();
  for (int64_t i = 0; i < n; ++i) {
    if (data[i] < lo || data[i] >= hi) return OutOfRange(name, *values, i, data[i], lo, hi, bound);
  }
  return absl::OkStatus();
}

// Index tensor `name` holds positions in [0, n] that never decrease (bag or segment starts
// into n elements).
absl::Status Offsets(const IndexArgs& a, absl::string_view name, int64_t n, absl::string_view bound) {
  MAGI_ASSIGN_OR_RETURN(std::optional<at::Tensor> values, Values(a, name));
  if (!values) return absl::OkStatus();
  const int64_t* data = values->data_ptr<int64_t>();
  const int64_t count = values->numel();
  for (int64_t i = 0; i < count; ++i) {
    if (data[i] < 0 || data[i] > n) return OutOfRange(name, *values, i, data[i], 0, n + 1, bound);
    if (i > 0 && data[i] < data[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat("index argument '", name, "' decreases at ",
                                                     Position(*values, i), ": ", data[i], " after ", data[i - 1],
                                                     " (offsets must not decrease)"));
    }
  }
  return absl::OkStatus();
}

// Index tensor `name` holds sizes >= `lowest` that never increase (packed sequences'
// batch sizes).
absl::Status NonIncreasingFrom(const IndexArgs& a, absl::string_view name, int64_t lowest) {
  MAGI_ASSIGN_OR_RETURN(std::optional<at::Tensor> values, Values(a, name));
  if (!values) return absl::OkStatus();
  const int64_t* data = values->data_ptr<int64_t>();
  for (int64_t i = 0; i < values->numel(); ++i) {
    if (data[i] < lowest) {
      return absl::InvalidArgumentError(absl::StrCat("index argument '", name, "' holds ", data[i], " at ",
                                                     Position(*values, i), ", below ", lowest));
    }
    if (i > 0 && data[i] > data[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat("index argument '", name, "' increases at ",
                                                     Position(*values, i), ": ", data[i], " after ", data[i - 1],
                                                     " (batch sizes of a packed sequence never increase)"));
    }
  }
  return absl::OkStatus();
}

// Tensor `name` has one of `allowed` elements (an undefined tensor has none).
absl::Status NumelIn(const IndexArgs& a, absl::string_view name, std::vector<int64_t> allowed,
                     absl::string_view why) {
  MAGI_ASSIGN_OR_RETURN(at::Tensor t, a.Tensor(name));
  const int64_t numel = t.defined() ? t.numel() : 0;
  if (std::find(allowed.begin(), allowed.end(), numel) != allowed.end()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("argument '", name, "' has ", numel, " elements, expected ",
                                                 absl::StrJoin(allowed, " or "), " (", why, ")"));
}

// The product of the last `dims` sizes of tensor `name` (the positions a pooling index
// addresses in one plane).
absl::StatusOr<int64_t> PlaneSize(const IndexArgs& a, absl::string_view name, int dims) {
  int64_t size = 1;
  for (int d = 1; d <= dims; ++d) {
    MAGI_ASSIGN_OR_RETURN(int64_t s, a.Size(name, -d));
    size *= s;
  }
  return size;
}

// ---------------------------------------------------------------------------- checks

absl::Status CheckEmbeddingDenseBackward(const IndexArgs& a) {
  MAGI_ASSIGN_OR_RETURN(int64_t num_weights, a.Int("num_weights"));
  return InRange(a, "indices", 0, num_weights, "num_weights: the rows of the gradient");
}

absl::Status CheckEmbeddingRenorm(const IndexArgs& a) {
  MAGI_ASSIGN_OR_RETURN(int64_t rows, a.Size("self", 0));
  return InRange(a, "indices", 0, rows, "self.size(0): the rows of the embedding");
}

absl::Status CheckEmbeddingBag(const IndexArgs& a) {
  MAGI_ASSIGN_OR_RETURN(at::Tensor indices, a.Tensor("indices"));
  return Offsets(a, "offsets", indices.defined() ? indices.numel() : 0, "the bags' starts in 'indices'");
}

// The arguments the three embedding bag backwards share. `bags` is grad.size(0).
absl::Status CheckBagBackwardCommon(const IndexArgs& a, int64_t bags, int64_t num_weights,
                                    absl::string_view num_weights_bound, bool has_offsets) {
  MAGI_ASSIGN_OR_RETURN(at::Tensor indices, a.Tensor("indices"));
  const int64_t n = indices.defined() ? indices.numel() : 0;
  MAGI_RETURN_IF_ERROR(InRange(a, "indices", 0, num_weights, num_weights_bound));
  // Empty where the forward took its sum fast path (the backward rebuilds it from offsets).
  MAGI_RETURN_IF_ERROR(NumelIn(a, "offset2bag", {0, n}, "none, or one bag per element of 'indices'"));
  MAGI_RETURN_IF_ERROR(InRange(a, "offset2bag", 0, bags, "grad.size(0): the number of bags"));
  if (has_offsets) {
    // include_last_offset adds one offset.
    MAGI_RETURN_IF_ERROR(NumelIn(a, "offsets", {bags, bags + 1}, "one start per bag: grad.size(0)"));
    MAGI_RETURN_IF_ERROR(Offsets(a, "offsets", n, "the bags' starts in 'indices'"));
  }
  return absl::OkStatus();
}

absl::Status CheckEmbeddingBagBackward(const IndexArgs& a, bool has_offsets) {
  MAGI_ASSIGN_OR_RETURN(int64_t bags, a.Size("grad", 0));
  MAGI_ASSIGN_OR_RETURN(int64_t num_weights, a.Int("num_weights"));
  MAGI_RETURN_IF_ERROR(
      CheckBagBackwardCommon(a, bags, num_weights, "num_weights: the rows of the gradient", has_offsets));
  MAGI_ASSIGN_OR_RETURN(int64_t mode, a.Int("mode"));
  if (mode == kMean || mode == kMax) {
    MAGI_RETURN_IF_ERROR(NumelIn(a, "bag_size", {bags}, "one size per bag: grad.size(0)"));
  }
  return absl::OkStatus();
}

absl::Status CheckEmbeddingBagBackwardWithOffsets(const IndexArgs& a) { return CheckEmbeddingBagBackward(a, true); }
absl::Status CheckEmbeddingBagDenseBackward(const IndexArgs& a) { return CheckEmbeddingBagBackward(a, false); }

absl::Status CheckEmbeddingBagPerSampleWeightsBackward(const IndexArgs& a) {
  MAGI_ASSIGN_OR_RETURN(int64_t bags, a.Size("grad", 0));
  MAGI_ASSIGN_OR_RETURN(int64_t rows, a.Size("weight", 0));
  return CheckBagBackwardCommon(a, bags, rows, "weight.size(0): the rows of the embedding", /*has_offsets=*/true);
}

template <int kDims>
absl::Status CheckMaxPoolBackward(const IndexArgs& a) {
  MAGI_ASSIGN_OR_RETURN(int64_t plane, PlaneSize(a, "self", kDims));
  return InRange(a, "indices", 0, plane, kDims == 2 ? "H * W of 'self'" : "D * H * W of 'self'");
}

template <int kDims>
absl::Status CheckAdaptiveMaxPoolBackward(const IndexArgs& a) {
  MAGI_RETURN_IF_ERROR(CheckMaxPoolBackward<kDims>(a));
  MAGI_ASSIGN_OR_RETURN(at::Tensor grad_output, a.Tensor("grad_output"));
  MAGI_ASSIGN_OR_RETURN(at::Tensor indices, a.Tensor("indices"));
  MAGI_ASSIGN_OR_RETURN(at::Tensor self, a.Tensor("self"));
  if (!grad_output.defined() || !indices.defined() || !self.defined()) return absl::OkStatus();
  if (indices.sizes() != grad_output.sizes()) {
    return absl::InvalidArgumentError(absl::StrCat("index argument 'indices' has sizes ", c10::str(indices.sizes()),
                                                   ", 'grad_output' ", c10::str(grad_output.sizes()),
                                                   " (one index per gradient element)"));
  }
  const int64_t planes = self.dim() - kDims;
  if (grad_output.dim() != self.dim() ||
      !std::equal(self.sizes().begin(), self.sizes().begin() + std::max<int64_t>(planes, 0),
                  grad_output.sizes().begin())) {
    return absl::InvalidArgumentError(absl::StrCat("argument 'grad_output' has sizes ", c10::str(grad_output.sizes()),
                                                   ", 'self' ", c10::str(self.sizes()),
                                                   " (their batch and channel sizes must agree)"));
  }
  return absl::OkStatus();
}

// _ctc_loss / _ctc_loss_backward, int[] and .Tensor lengths alike.
absl::Status CheckCtc(const IndexArgs& a, bool backward) {
  MAGI_ASSIGN_OR_RETURN(at::Tensor log_probs, a.Tensor("log_probs"));
  // The kernel insists on (T, N, C); CUDA tensors are not this table's.
  if (!log_probs.defined() || log_probs.dim() != 3 || !log_probs.device().is_cpu()) return absl::OkStatus();
  const int64_t time = log_probs.size(0), batch = log_probs.size(1), classes = log_probs.size(2);
  MAGI_ASSIGN_OR_RETURN(std::vector<int64_t> input_lengths, a.Ints("input_lengths"));
  MAGI_ASSIGN_OR_RETURN(std::vector<int64_t> target_lengths, a.Ints("target_lengths"));
  auto one_per_sample = [batch](absl::string_view name, const std::vector<int64_t>& lengths) {
    if (static_cast<int64_t>(lengths.size()) == batch) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("argument '", name, "' has ", lengths.size(), " lengths, expected ",
                                                   batch, " (log_probs.size(1))"));
  };
  MAGI_RETURN_IF_ERROR(one_per_sample("input_lengths", input_lengths));
  MAGI_RETURN_IF_ERROR(one_per_sample("target_lengths", target_lengths));
  for (int64_t b = 0; b < batch; ++b) {
    if (input_lengths[b] < 0 || input_lengths[b] > time) {
      return absl::InvalidArgumentError(absl::StrCat("argument 'input_lengths' holds ", input_lengths[b], " at [", b,
                                                     "], outside [0, ", time, "] (log_probs.size(0))"));
    }
    if (target_lengths[b] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("argument 'target_lengths' holds ", target_lengths[b], " at [", b, "], below 0"));
    }
  }
  MAGI_ASSIGN_OR_RETURN(std::optional<at::Tensor> targets, Values(a, "targets"));
  if (!targets) return absl::OkStatus();
  // Only the first target_lengths[b] targets of each sample are read; padding may hold anything.
  const int64_t* data = targets->data_ptr<int64_t>();
  int64_t max_target = 0;
  int64_t start = 0;  // 1-D targets: the samples' targets one after another
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t length = target_lengths[b];
    max_target = std::max(max_target, length);
    int64_t first;
    if (targets->dim() == 2) {
      if (targets->size(0) != batch || length > targets->size(1)) {
        return absl::InvalidArgumentError(absl::StrCat("argument 'targets' has sizes ", c10::str(targets->sizes()),
                                                       ", too small for target_lengths[", b, "] = ", length));
      }
      first = b * targets->size(1);
    } else {
      if (start + length > targets->numel()) {
        return absl::InvalidArgumentError(absl::StrCat("argument 'targets' has ", targets->numel(),
                                                       " elements, fewer than the target_lengths add up to"));
      }
      first = start;
      start += length;
    }
    for (int64_t i = first; i < first + length; ++i) {
      if (data[i] < 0 || data[i] >= classes) {
        return OutOfRange("targets", *targets, i, data[i], 0, classes, "log_probs.size(2): the classes");
      }
    }
  }
  if (!backward) return absl::OkStatus();
  MAGI_RETURN_IF_ERROR(NumelIn(a, "grad", {batch}, "one per sample: log_probs.size(1)"));
  MAGI_RETURN_IF_ERROR(NumelIn(a, "neg_log_likelihood", {batch}, "one per sample: log_probs.size(1)"));
  MAGI_ASSIGN_OR_RETURN(at::Tensor log_alpha, a.Tensor("log_alpha"));
  if (!log_alpha.defined() || log_alpha.dim() != 3 || log_alpha.size(0) != batch || log_alpha.size(1) < time ||
      log_alpha.size(2) < 2 * max_target + 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("argument 'log_alpha' has sizes ", log_alpha.defined() ? c10::str(log_alpha.sizes()) : "none",
                     ", expected [", batch, ", ", time, ", ", 2 * max_target + 1,
                     "] (batch, time, 2 * the longest target + 1)"));
  }
  return absl::OkStatus();
}

absl::Status CheckCtcLoss(const IndexArgs& a) { return CheckCtc(a, false); }
absl::Status CheckCtcLossBackward(const IndexArgs& a) { return CheckCtc(a, true); }

// segment_reduce / _segment_reduce_backward: lengths (or offsets) of segments along `axis`
// of `data`, one row per position of data's leading dimensions.
absl::Status CheckSegmentReduce(const IndexArgs& a) {
  MAGI_ASSIGN_OR_RETURN(at::Tensor data, a.Tensor("data"));
  MAGI_ASSIGN_OR_RETURN(int64_t axis, a.Int("axis"));
  if (!data.defined()) return absl::OkStatus();
  if (axis < 0) axis += data.dim();
  if (axis < 0 || axis >= data.dim()) return absl::OkStatus();  // the kernel rejects it
  const int64_t extent = data.size(axis);
  for (const char* name : {"lengths", "offsets"}) {
    const bool lengths = absl::string_view(name) == "lengths";
    MAGI_ASSIGN_OR_RETURN(std::optional<at::Tensor> values, Values(a, name));
    if (!values || values->numel() == 0) continue;
    if (values->dim() != axis + 1 || !std::equal(data.sizes().begin(), data.sizes().begin() + axis,
                                                 values->sizes().begin())) {
      return absl::InvalidArgumentError(absl::StrCat("index argument '", name, "' has sizes ",
                                                     c10::str(values->sizes()), ", 'data' ", c10::str(data.sizes()),
                                                     " (its leading sizes must be data's before axis ", axis, ")"));
    }
    const int64_t width = values->size(axis);
    const int64_t* v = values->data_ptr<int64_t>();
    for (int64_t row = 0; row * width < values->numel(); ++row) {
      const int64_t* r = v + row * width;
      int64_t total = 0;
      for (int64_t i = 0; i < width; ++i) {
        const int64_t flat = row * width + i;
        if (lengths) {
          if (r[i] < 0) return OutOfRange(name, *values, flat, r[i], 0, extent + 1, "a segment's length");
          total += r[i];
          if (total > extent) {
            return absl::InvalidArgumentError(absl::StrCat("index argument 'lengths' adds up to more than ", extent,
                                                           " (data.size(", axis, ")) at ", Position(*values, flat)));
          }
        } else {
          if (r[i] < 0 || r[i] > extent) {
            return OutOfRange(name, *values, flat, r[i], 0, extent + 1, absl::StrCat("data.size(", axis, ")"));
          }
          if (i > 0 && r[i] < r[i - 1]) {
            return absl::InvalidArgumentError(absl::StrCat("index argument 'offsets' decreases at ",
                                                           Position(*values, flat), ": ", r[i], " after ", r[i - 1]));
          }
        }
      }
      if (lengths && total != extent) {
        return absl::InvalidArgumentError(absl::StrCat("index argument 'lengths' adds up to ", total, " in row ", row,
                                                       ", not ", extent, " (data.size(", axis, "))"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckPackedBatchSizes(const IndexArgs& a) { return NonIncreasingFrom(a, "batch_sizes", 1); }

// The table: every op whose CPU kernel tools/aten_index_probe.py found reading or writing
// through an index it does not check (docs/fx.md has the probe's table).
const absl::flat_hash_map<std::string, IndexCheck>& Table() {
  static const auto* table = new absl::flat_hash_map<std::string, IndexCheck>{
      {"aten::embedding_dense_backward", &CheckEmbeddingDenseBackward},
      {"aten::embedding_renorm_", &CheckEmbeddingRenorm},
      {"aten::_embedding_bag", &CheckEmbeddingBag},
      {"aten::_embedding_bag_forward_only", &CheckEmbeddingBag},
      {"aten::_embedding_bag_backward", &CheckEmbeddingBagBackwardWithOffsets},
      {"aten::_embedding_bag_dense_backward", &CheckEmbeddingBagDenseBackward},
      {"aten::_embedding_bag_per_sample_weights_backward", &CheckEmbeddingBagPerSampleWeightsBackward},
      {"aten::max_pool2d_with_indices_backward", &CheckMaxPoolBackward<2>},
      {"aten::max_pool3d_with_indices_backward", &CheckMaxPoolBackward<3>},
      {"aten::adaptive_max_pool2d_backward", &CheckAdaptiveMaxPoolBackward<2>},
      {"aten::adaptive_max_pool3d_backward", &CheckAdaptiveMaxPoolBackward<3>},
      {"aten::_ctc_loss", &CheckCtcLoss},
      {"aten::_ctc_loss_backward", &CheckCtcLossBackward},
      {"aten::segment_reduce", &CheckSegmentReduce},
      {"aten::_segment_reduce_backward", &CheckSegmentReduce},
      {"aten::_pad_packed_sequence", &CheckPackedBatchSizes},
      {"aten::_pack_padded_sequence_backward", &CheckPackedBatchSizes},
  };
  return *table;
}

}  // namespace

IndexCheck FindIndexCheck(absl::string_view op) {
  absl::string_view name = op.substr(0, op.find('.'));
  auto it = Table().find(name);
  return it == Table().end() ? nullptr : it->second;
}

absl::Status RunIndexCheck(IndexCheck check, const c10::FunctionSchema& schema, const torch::jit::Stack& stack) {
  if (check == nullptr) return absl::OkStatus();
  absl::Status status;
  // An exception is a bug of the check: refuse rather than risk the kernel.
  MAGI_RETURN_IF_ERROR(compat::CallTorchLazy([&] { return absl::StrCat("the index check of ", schema.name(), " failed"); },
                                             [&] { status = check(IndexArgs(schema, stack)); }));
  if (status.ok() || status.code() != absl::StatusCode::kInvalidArgument) return status;
  return absl::InvalidArgumentError(
      absl::StrCat(status.message(), "; LibTorch's CPU kernel does not check this (it would read or write memory "
                                     "it does not own), so Magi refuses the call"));
}

std::vector<std::string> IndexCheckedOps() {
  std::vector<std::string> ops;
  for (const auto& [op, check] : Table()) ops.push_back(op);
  std::sort(ops.begin(), ops.end());
  return ops;
}

}  // namespace magi
