// Constant arguments of IR nodes, covering what ATen schemas take.
//
// A node's argument list mirrors the operator schema in order (see node.h). Each
// argument holds an Attribute: a constant (none, bool, int, float, string, int/float/
// bool list, dtype, device) or a reference to the node's operands (one tensor, or a
// tensor list whose entries may be none, as in `Tensor?[] indices`). Keeping both in
// one ordered list lets a backend rebuild the exact ATen call stack.
//
//   Attribute(int64_t{1}).ToString()                 // "1"
//   Attribute(std::vector<int64_t>{0, 1}).ToString() // "[0, 1]"
//   Attribute(DType::kBFloat16).ToString()           // "dtype(bf16)"
#ifndef MAGI_IR_ATTRIBUTE_H_
#define MAGI_IR_ATTRIBUTE_H_

#include "absl/strings/string_view.h"
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "magi/ir/types.h"

namespace magi {

// An argument that is one operand of the node: `operands()[index]`.
struct OperandRef {
  int index = 0;
  bool operator==(const OperandRef& o) const { return index == o.index; }
};

// An argument that is a list of operands; kNoOperand marks a `none` entry.
struct OperandListRef {
  static constexpr int kNoOperand = -1;
  std::vector<int> indices;
  bool operator==(const OperandListRef& o) const { return indices == o.indices; }
};

struct NoneAttr {
  bool operator==(const NoneAttr&) const { return true; }
};

enum class AttrKind : uint8_t {
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kIntList,
  kFloatList,
  kBoolList,
  kDType,
  kDevice,
  kOperand,
  kOperandList,
};

// A constant or an operand reference; see the file comment.
class Attribute {
 public:
  Attribute() : value_(NoneAttr{}) {}
  Attribute(NoneAttr v) : value_(v) {}
  Attribute(bool v) : value_(v) {}
  Attribute(int v) : value_(int64_t{v}) {}
  Attribute(int64_t v) : value_(v) {}
  Attribute(double v) : value_(v) {}
  Attribute(const char* v) : value_(std::string(v)) {}
  Attribute(std::string v) : value_(std::move(v)) {}
  Attribute(std::vector<int64_t> v) : value_(std::move(v)) {}
  Attribute(std::vector<double> v) : value_(std::move(v)) {}
  Attribute(std::vector<bool> v) : value_(std::move(v)) {}
  Attribute(DType v) : value_(v) {}
  Attribute(Device v) : value_(v) {}
  Attribute(OperandRef v) : value_(v) {}
  Attribute(OperandListRef v) : value_(std::move(v)) {}

  AttrKind kind() const { return static_cast<AttrKind>(value_.index()); }
  bool is_none() const { return kind() == AttrKind::kNone; }
  bool is_operand_ref() const { return kind() == AttrKind::kOperand || kind() == AttrKind::kOperandList; }

  // Typed access; the caller checks kind() first (a wrong kind is a programmer error).
  bool as_bool() const { return std::get<bool>(value_); }
  int64_t as_int() const { return std::get<int64_t>(value_); }
  double as_float() const { return std::get<double>(value_); }
  const std::string& as_string() const { return std::get<std::string>(value_); }
  const std::vector<int64_t>& as_int_list() const { return std::get<std::vector<int64_t>>(value_); }
  const std::vector<double>& as_float_list() const { return std::get<std::vector<double>>(value_); }
  const std::vector<bool>& as_bool_list() const { return std::get<std::vector<bool>>(value_); }
  DType as_dtype() const { return std::get<DType>(value_); }
  Device as_device() const { return std::get<Device>(value_); }
  const OperandRef& as_operand() const { return std::get<OperandRef>(value_); }
  const OperandListRef& as_operand_list() const { return std::get<OperandListRef>(value_); }
  OperandListRef& mutable_operand_list() { return std::get<OperandListRef>(value_); }

  // Text form of a constant. Operand references print as "$N" / "[$N, none]"; the
  // IR printer replaces them with value names.
  std::string ToString() const;

  bool operator==(const Attribute& o) const { return value_ == o.value_; }
  bool operator!=(const Attribute& o) const { return !(*this == o); }

 private:
  std::variant<NoneAttr, bool, int64_t, double, std::string, std::vector<int64_t>, std::vector<double>,
               std::vector<bool>, DType, Device, OperandRef, OperandListRef>
      value_;
};

// A name for `kind` in messages ("int list").
absl::string_view AttrKindName(AttrKind kind);

// Formats a double so that parsing the text gives back the same bits and the text is
// never mistaken for an integer ("1.0", "1e-05", "inf", "nan").
std::string FormatFloat(double value);
// Quotes and escapes a string for text IR.
std::string QuoteString(absl::string_view text);

// One entry of a node's ordered argument list. An empty name is a positional argument.
struct Argument {
  std::string name;
  Attribute value;
  bool operator==(const Argument& o) const { return name == o.name && value == o.value; }
};

}  // namespace magi

#endif  // MAGI_IR_ATTRIBUTE_H_
