#include "magi/ir/attribute.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace magi {

absl::string_view AttrKindName(AttrKind kind) {
  switch (kind) {
    case AttrKind::kNone:
      return "none";
    case AttrKind::kBool:
      return "bool";
    case AttrKind::kInt:
      return "int";
    case AttrKind::kFloat:
      return "float";
    case AttrKind::kString:
      return "string";
    case AttrKind::kIntList:
      return "int list";
    case AttrKind::kFloatList:
      return "float list";
    case AttrKind::kBoolList:
      return "bool list";
    case AttrKind::kDType:
      return "dtype";
    case AttrKind::kDevice:
      return "device";
    case AttrKind::kOperand:
      return "tensor";
    case AttrKind::kOperandList:
      return "tensor list";
  }
  return "unknown";
}

std::string FormatFloat(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // %.17g round-trips every double; shorter forms are tried first for readability.
  for (int precision : {6, 9, 12, 15, 17}) {
    std::string text = absl::StrFormat("%.*g", precision, value);
    if (std::strtod(text.c_str(), nullptr) == value) {
      if (text.find_first_of(".e") == std::string::npos) text += ".0";
      return text;
    }
  }
  return absl::StrFormat("%.17g", value);
}

std::string QuoteString(absl::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c >= 0x7f) {
          absl::StrAppendFormat(&out, "\\x%02x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += "\"";
  return out;
}

std::string Attribute::ToString() const {
  switch (kind()) {
    case AttrKind::kNone:
      return "none";
    case AttrKind::kBool:
      return as_bool() ? "true" : "false";
    case AttrKind::kInt:
      return absl::StrCat(as_int());
    case AttrKind::kFloat:
      return FormatFloat(as_float());
    case AttrKind::kString:
      return QuoteString(as_string());
    case AttrKind::kIntList:
      return absl::StrCat("[", absl::StrJoin(as_int_list(), ", "), "]");
    case AttrKind::kFloatList:
      return absl::StrCat("[", absl::StrJoin(as_float_list(), ", ", [](std::string* out, double v) {
                            out->append(FormatFloat(v));
                          }),
                          "]");
    case AttrKind::kBoolList:
      return absl::StrCat("[", absl::StrJoin(as_bool_list(), ", ", [](std::string* out, bool v) {
                            out->append(v ? "true" : "false");
                          }),
                          "]");
    case AttrKind::kDType:
      return absl::StrCat("dtype(", DTypeName(as_dtype()), ")");
    case AttrKind::kDevice:
      return absl::StrCat("device(", as_device().ToString(), ")");
    case AttrKind::kOperand:
      return absl::StrCat("$", as_operand().index);
    case AttrKind::kOperandList:
      return absl::StrCat("[", absl::StrJoin(as_operand_list().indices, ", ", [](std::string* out, int i) {
                            out->append(i == OperandListRef::kNoOperand ? "none" : absl::StrCat("$", i));
                          }),
                          "]");
  }
  return "none";
}

}  // namespace magi
