// Typed pass options: each pass with options declares them as a struct, and each field
// once, in a table (name, member, codec); parsing from text and printing back follow
// from the table, so an option's name is written in one place.
//
//   struct BucketCollectivesOptions : PassOptions<BucketCollectivesOptions> {
//     double max_mb = 64;
//     std::optional<CollectiveKind> kinds;  // every kind when empty
//     static const OptionSchema<BucketCollectivesOptions>& Schema();
//   };
//
//   // bucket_collectives.cc
//   const OptionSchema<BucketCollectivesOptions>& BucketCollectivesOptions::Schema() {
//     static const auto* schema = new OptionSchema<BucketCollectivesOptions>({
//         Field("max_mb", &BucketCollectivesOptions::max_mb, Number(0), kAlwaysPrinted),
//         Field("kinds", &BucketCollectivesOptions::kinds, Choice<std::optional<CollectiveKind>>({...})),
//     });
//     return *schema;
//   }
//
//   BucketCollectivesOptions options;        // code sets fields directly ...
//   options.max_mb = 2;
//   options.Print();                         // ... and text is for reports: "max_mb=2"
//   BucketCollectivesOptions::Parse({{"max_mb", "2"}});  // `magi opt` and textual pipelines
//
// Parse starts from the defaults, reads every key of the text (InvalidArgument for an
// unknown key or a bad value, naming the option, e.g. "max_mb must be a non-negative,
// finite number, not 'lots'"), then runs the schema's check. Print writes "key=value,..."
// in key order: the options that differ from the defaults, plus those marked
// kAlwaysPrinted (knobs the strategy search sets, so a report says their value even where
// it is the default). Print(Parse(text)) == text for such canonical text, and
// Parse(Print(options)) gives `options` back (numbers to the 6 significant digits StrCat
// prints). The errors do not name the pass: ParsePassOptions (pass_registration.h) adds it.
#ifndef MAGI_PASSES_PASS_OPTIONS_H_
#define MAGI_PASSES_PASS_OPTIONS_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "magi/registry/registry.h"

namespace magi {

// How one option's value is read from text and written back.
template <typename T>
struct OptionCodec {
  std::string syntax;    // what a value looks like, in the list of options: "N", "keep|reshard"
  std::string expected;  // what a value must be, for errors: "an integer in 0..64"
  std::function<bool(absl::string_view text, T& value)> parse;  // false: not a valid value
  std::function<std::string(const T& value)> print;
};

// Field flags.
inline constexpr int kAlwaysPrinted = 1;  // printed even when equal to the default
inline constexpr int kParseOnly = 2;      // another spelling of a printed field: read, never printed

// One option of `Options`, type-erased (Field() makes one).
template <typename Options>
struct OptionField {
  std::string name;
  std::string syntax;
  int flags = 0;
  std::function<absl::Status(absl::string_view text, Options& options)> parse;
  std::function<std::string(const Options& options)> print;
};

namespace pass_options_internal {
template <typename T>
struct NonDeduced {
  using type = T;
};
}  // namespace pass_options_internal

// The option `name` stored in `member`, read and written by `codec`.
template <typename Options, typename T>
OptionField<Options> Field(std::string name, T Options::*member,
                           typename pass_options_internal::NonDeduced<OptionCodec<T>>::type codec, int flags = 0) {
  OptionField<Options> field;
  field.name = name;
  field.syntax = codec.syntax;
  field.flags = flags;
  field.parse = [name, member, codec](absl::string_view text, Options& options) -> absl::Status {
    if (codec.parse(text, options.*member)) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(name, " must be ", codec.expected, ", not '", text, "'"));
  };
  field.print = [member, codec](const Options& options) { return codec.print(options.*member); };
  return field;
}

// The options of one pass: its fields, and a check of the whole (e.g. that a required
// option was given) run after parsing.
template <typename Options>
class OptionSchema {
 public:
  using Check = std::function<absl::Status(const Options&)>;

  explicit OptionSchema(std::vector<OptionField<Options>> fields, Check check = nullptr)
      : fields_(std::move(fields)), check_(std::move(check)) {}

  absl::StatusOr<Options> Parse(const ComponentOptions& text) const {
    Options options;
    for (const auto& [key, value] : text) {
      const OptionField<Options>* field = Find(key);
      if (field == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("unknown option '", key, "'; ", Usage()));
      }
      absl::Status parsed = field->parse(value, options);
      if (!parsed.ok()) return parsed;
    }
    if (check_) {
      absl::Status checked = check_(options);
      if (!checked.ok()) return checked;
    }
    return options;
  }

  std::string Print(const Options& options) const {
    static const Options* const defaults = new Options();
    ComponentOptions printed;  // sorted by key
    for (const OptionField<Options>& field : fields_) {
      if (field.flags & kParseOnly) continue;
      std::string value = field.print(options);
      if (value.empty() || (!(field.flags & kAlwaysPrinted) && value == field.print(*defaults))) continue;
      printed.emplace(field.name, std::move(value));
    }
    return absl::StrJoin(printed, ",", absl::PairFormatter("="));
  }

  // "the options are a=N, b=keep|reshard" or "there are no options".
  std::string Usage() const {
    if (fields_.empty()) return "there are no options";
    return absl::StrCat("the options are ", absl::StrJoin(fields_, ", ", [](std::string* out, const auto& field) {
                          absl::StrAppend(out, field.name, "=", field.syntax);
                        }));
  }

  const std::vector<OptionField<Options>>& fields() const { return fields_; }

 private:
  const OptionField<Options>* Find(absl::string_view name) const {
    for (const OptionField<Options>& field : fields_) {
      if (field.name == name) return &field;
    }
    return nullptr;
  }

  std::vector<OptionField<Options>> fields_;
  Check check_;
};

// Gives an options struct its Parse and Print from `Derived::Schema()`.
template <typename Derived>
struct PassOptions {
  static absl::StatusOr<Derived> Parse(const ComponentOptions& text) { return Derived::Schema().Parse(text); }
  std::string Print() const { return Derived::Schema().Print(static_cast<const Derived&>(*this)); }
};

// The options of a pass that has none: Parse refuses every key.
struct NoPassOptions : PassOptions<NoPassOptions> {
  static const OptionSchema<NoPassOptions>& Schema();
};

// Codecs.

// An integer in [min, max] (of the member's type: int or int64_t).
struct IntegerRange {
  int64_t min;
  int64_t max;
  template <typename T>
  operator OptionCodec<T>() const {  // NOLINT: converts to the member's codec
    const int64_t lo = min;
    const int64_t hi = std::min<int64_t>(max, std::numeric_limits<T>::max());
    OptionCodec<T> codec;
    codec.syntax = "N";
    codec.expected = hi == std::numeric_limits<T>::max() ? absl::StrCat("an integer >= ", lo)
                                                         : absl::StrCat("an integer in ", lo, "..", hi);
    codec.parse = [lo, hi](absl::string_view text, T& value) {
      int64_t parsed = 0;
      if (!absl::SimpleAtoi(text, &parsed) || parsed < lo || parsed > hi) return false;
      value = static_cast<T>(parsed);
      return true;
    };
    codec.print = [](const T& value) { return absl::StrCat(value); };
    return codec;
  }
};
inline IntegerRange Integer(int64_t min, int64_t max = std::numeric_limits<int64_t>::max()) { return {min, max}; }

// A finite number >= min (> min when `exclusive`), printed as StrCat prints a double.
OptionCodec<double> Number(double min, bool exclusive = false);

// Any non-empty value (a name).
OptionCodec<std::string> Text(std::string syntax = "NAME");

// One of named values, printed by name.
template <typename T>
OptionCodec<T> Choice(std::vector<std::pair<std::string, T>> choices) {
  OptionCodec<T> codec;
  std::vector<std::string> names;
  for (const auto& choice : choices) names.push_back(choice.first);
  codec.syntax = absl::StrJoin(names, "|");
  codec.expected = absl::StrCat("one of ", codec.syntax);
  codec.parse = [choices](absl::string_view text, T& value) {
    for (const auto& [name, choice] : choices) {
      if (name == text) {
        value = choice;
        return true;
      }
    }
    return false;
  };
  codec.print = [choices](const T& value) {
    for (const auto& [name, choice] : choices) {
      if (choice == value) return name;
    }
    return std::string();
  };
  return codec;
}

}  // namespace magi

#endif  // MAGI_PASSES_PASS_OPTIONS_H_
