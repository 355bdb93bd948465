#include "magi/base/tensor_diff.h"

#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace magi {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) { return absl::StrCat("[", absl::StrJoin(shape, ","), "]"); }

// The multi-dimensional index of flat element `flat` of a C-contiguous `shape`.
std::string IndexText(const std::vector<int64_t>& shape, int64_t flat) {
  if (shape.empty()) return "[]";
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    int64_t size = shape[d] > 0 ? shape[d] : 1;
    index[d] = flat % size;
    flat /= size;
  }
  return ShapeText(index);
}

template <typename T>
T Load(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

float HalfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// One element as a number, with its bit pattern for floating-point types.
std::string ElementText(absl::string_view dtype, const char* p) {
  if (dtype == "float32") return absl::StrFormat("%.9g (0x%08x)", Load<float>(p), Load<uint32_t>(p));
  if (dtype == "float64") return absl::StrFormat("%.17g (0x%016x)", Load<double>(p), Load<uint64_t>(p));
  if (dtype == "bfloat16") {
    uint16_t bits = Load<uint16_t>(p);
    uint32_t widened = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &widened, sizeof(f));
    return absl::StrFormat("%.4g (0x%04x)", f, bits);
  }
  if (dtype == "float16") return absl::StrFormat("%.5g (0x%04x)", HalfToFloat(Load<uint16_t>(p)), Load<uint16_t>(p));
  if (dtype == "int64") return absl::StrCat(Load<int64_t>(p));
  if (dtype == "int32") return absl::StrCat(Load<int32_t>(p));
  if (dtype == "int16") return absl::StrCat(Load<int16_t>(p));
  if (dtype == "int8") return absl::StrCat(static_cast<int>(Load<int8_t>(p)));
  if (dtype == "uint8" || dtype == "bool") return absl::StrCat(static_cast<int>(Load<uint8_t>(p)));
  return absl::StrFormat("0x%02x", static_cast<unsigned char>(*p));
}

std::string Megabytes(int64_t bytes) { return absl::StrFormat("%.3f MB", bytes / 1e6); }

}  // namespace

int64_t DTypeSize(absl::string_view dtype) {
  if (dtype == "float64" || dtype == "int64") return 8;
  if (dtype == "float32" || dtype == "int32") return 4;
  if (dtype == "bfloat16" || dtype == "float16" || dtype == "int16") return 2;
  return 1;
}

TensorDiff CompareTensors(const std::vector<RawTensor>& a, const std::vector<RawTensor>& b, absl::string_view a_label,
                          absl::string_view b_label) {
  std::map<std::string, const RawTensor*> in_b;
  for (const RawTensor& tensor : b) in_b[tensor.name] = &tensor;
  std::map<std::string, bool> in_a;
  for (const RawTensor& tensor : a) in_a[tensor.name] = true;

  std::string first;
  int differing = 0;
  int64_t total_bytes = 0;
  auto note = [&](std::string text) {
    ++differing;
    if (first.empty()) first = std::move(text);
  };
  for (const RawTensor& x : a) {
    auto it = in_b.find(x.name);
    if (it == in_b.end()) {
      note(absl::StrCat("tensor '", x.name, "' is in ", a_label, " but not in ", b_label));
      continue;
    }
    const RawTensor& y = *it->second;
    if (x.dtype != y.dtype || x.shape != y.shape) {
      note(absl::StrCat("tensor '", x.name, "' is ", x.dtype, ShapeText(x.shape), " in ", a_label, " but ", y.dtype,
                        ShapeText(y.shape), " in ", b_label));
      continue;
    }
    if (x.bytes.size() != y.bytes.size()) {
      note(absl::StrCat("tensor '", x.name, "' has ", x.bytes.size(), " bytes in ", a_label, " but ",
                        y.bytes.size(), " in ", b_label));
      continue;
    }
    total_bytes += static_cast<int64_t>(x.bytes.size());
    if (x.bytes == y.bytes) continue;
    const int64_t size = DTypeSize(x.dtype);
    const int64_t elements = static_cast<int64_t>(x.bytes.size()) / size;
    int64_t first_element = -1, count = 0;
    for (int64_t i = 0; i < elements; ++i) {
      if (std::memcmp(x.bytes.data() + i * size, y.bytes.data() + i * size, size) != 0) {
        if (first_element < 0) first_element = i;
        ++count;
      }
    }
    const char* pa = x.bytes.data() + first_element * size;
    const char* pb = y.bytes.data() + first_element * size;
    note(absl::StrCat("tensor '", x.name, "' (", x.dtype, ShapeText(x.shape), ") element ",
                      IndexText(x.shape, first_element), " (flat ", first_element, "): ", a_label, " ",
                      ElementText(x.dtype, pa), ", ", b_label, " ", ElementText(x.dtype, pb), "; ", count, " of ",
                      elements, " elements differ"));
  }
  for (const RawTensor& y : b) {
    if (!in_a.count(y.name)) note(absl::StrCat("tensor '", y.name, "' is in ", b_label, " but not in ", a_label));
  }
  TensorDiff diff;
  diff.identical = differing == 0;
  if (diff.identical) {
    diff.report = absl::StrCat("identical: ", a.size(), " tensors, ", Megabytes(total_bytes));
  } else {
    diff.report = absl::StrCat("first difference: ", first, "\n", differing, " of ", std::max(a.size(), b.size()),
                               " tensors differ");
  }
  return diff;
}

}  // namespace magi
