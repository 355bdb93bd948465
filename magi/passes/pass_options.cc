#include "magi/passes/pass_options.h"

#include "magi/base/numbers.h"

namespace magi {

const OptionSchema<NoPassOptions>& NoPassOptions::Schema() {
  static const auto* schema = new OptionSchema<NoPassOptions>({});
  return *schema;
}

OptionCodec<double> Number(double min, bool exclusive) {
  OptionCodec<double> codec;
  codec.syntax = "X";
  if (min == 0) {
    codec.expected = exclusive ? "a positive, finite number" : "a non-negative, finite number";
  } else {
    codec.expected = absl::StrCat("a finite number ", exclusive ? "> " : ">= ", min);
  }
  codec.parse = [min, exclusive](absl::string_view text, double& value) {
    double parsed = 0;
    if (!ParseFiniteDouble(text, &parsed) || parsed < min || (exclusive && parsed == min)) return false;
    value = parsed;
    return true;
  };
  codec.print = [](const double& value) { return absl::StrCat(value); };
  return codec;
}

OptionCodec<std::string> Text(std::string syntax) {
  OptionCodec<std::string> codec;
  codec.syntax = std::move(syntax);
  codec.expected = "a name";
  codec.parse = [](absl::string_view text, std::string& value) {
    if (text.empty()) return false;
    value = std::string(text);
    return true;
  };
  codec.print = [](const std::string& value) { return value; };
  return codec;
}

}  // namespace magi
