#include "magi/tools/tensor_file_reader.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <variant>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "magi/base/checked_math.h"
#include "magi/base/file.h"
#include "magi/base/status_macros.h"

namespace magi {
namespace {

// The JSON the index needs: objects, arrays, strings, integers (other numbers and
// literals parse but the index rejects them where it wants integers).
struct Json;
using JsonObject = std::map<std::string, Json>;
using JsonArray = std::vector<Json>;
struct Json {
  std::variant<std::nullptr_t, bool, int64_t, double, std::string, JsonArray, JsonObject> value;
};

class JsonParser {
 public:
  explicit JsonParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<Json> ParseDocument() {
    MAGI_ASSIGN_OR_RETURN(Json json, ParseValue(0));
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected text after the JSON value");
    return json;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    // Line and column of pos_, for the message.
    int line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(line, ":", column, ": ", what));
  }

  void SkipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  bool Consume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  absl::StatusOr<Json> ParseValue(int depth) {
    if (depth > 64) return Error("JSON nested too deeply");
    SkipSpace();
    if (pos_ >= text_.size()) return Error("unexpected end of JSON");
    char c = text_[pos_];
    if (c == '{') return ParseObject(depth);
    if (c == '[') return ParseArray(depth);
    if (c == '"') {
      MAGI_ASSIGN_OR_RETURN(std::string s, ParseString());
      return Json{std::move(s)};
    }
    for (auto [word, json] : {std::pair<absl::string_view, Json>{"true", Json{true}}, {"false", Json{false}},
                              {"null", Json{nullptr}}}) {
      if (absl::StartsWith(text_.substr(pos_), word)) {
        pos_ += word.size();
        return json;
      }
    }
    return ParseNumber();
  }

  absl::StatusOr<Json> ParseObject(int depth) {
    ++pos_;  // '{'
    JsonObject object;
    if (Consume('}')) return Json{std::move(object)};
    while (true) {
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '"') return Error("expected a string key");
      MAGI_ASSIGN_OR_RETURN(std::string key, ParseString());
      if (!Consume(':')) return Error("expected ':'");
      MAGI_ASSIGN_OR_RETURN(Json value, ParseValue(depth + 1));
      if (!object.emplace(key, std::move(value)).second) return Error(absl::StrCat("duplicate key \"", key, "\""));
      if (Consume('}')) return Json{std::move(object)};
      if (!Consume(',')) return Error("expected ',' or '}'");
    }
  }

  absl::StatusOr<Json> ParseArray(int depth) {
    ++pos_;  // '['
    JsonArray array;
    if (Consume(']')) return Json{std::move(array)};
    while (true) {
      MAGI_ASSIGN_OR_RETURN(Json value, ParseValue(depth + 1));
      array.push_back(std::move(value));
      if (Consume(']')) return Json{std::move(array)};
      if (!Consume(',')) return Error("expected ',' or ']'");
    }
  }

  absl::StatusOr<std::string> ParseString() {
    ++pos_;  // '"'
    std::string out;
    while (pos_ < text_.size()) {
      char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) return Error("control character in a string");
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= text_.size()) break;
      char e = text_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out.push_back(e);
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          uint32_t code = 0;
          if (pos_ + 4 > text_.size()) return Error("short \\u escape");
          for (int i = 0; i < 4; ++i) {
            char h = text_[pos_++];
            int digit = std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                        : (h >= 'a' && h <= 'f')                   ? h - 'a' + 10
                        : (h >= 'A' && h <= 'F')                   ? h - 'A' + 10
                                                                   : -1;
            if (digit < 0) return Error("bad \\u escape");
            code = code * 16 + static_cast<uint32_t>(digit);
          }
          // UTF-8 of the code unit (names are ASCII in practice; surrogates are kept as they are).
          if (code < 0x80) {
            out.push_back(static_cast<char>(code));
          } else if (code < 0x800) {
            out.push_back(static_cast<char>(0xc0 | (code >> 6)));
            out.push_back(static_cast<char>(0x80 | (code & 0x3f)));
          } else {
            out.push_back(static_cast<char>(0xe0 | (code >> 12)));
            out.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3f)));
            out.push_back(static_cast<char>(0x80 | (code & 0x3f)));
          }
          break;
        }
        default:
          return Error(absl::StrCat("bad escape \\", std::string(1, e)));
      }
    }
    return Error("unterminated string");
  }

  absl::StatusOr<Json> ParseNumber() {
    size_t start = pos_;
    bool integral = true;
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        ++pos_;
      } else if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
        integral = false;
        ++pos_;
      } else {
        break;
      }
    }
    absl::string_view number = text_.substr(start, pos_ - start);
    if (number.empty() || number == "-") {
      pos_ = start;
      return Error("expected a JSON value");
    }
    if (integral) {
      int64_t value = 0;
      if (!absl::SimpleAtoi(number, &value)) return Error(absl::StrCat("integer out of range: ", number));
      return Json{value};
    }
    double value = 0;
    if (!absl::SimpleAtod(number, &value)) return Error(absl::StrCat("bad number: ", number));
    return Json{value};
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

const int64_t* AsInt(const Json& json) { return std::get_if<int64_t>(&json.value); }

}  // namespace

bool IsTensorFileDType(const std::string& dtype) {
  static const std::set<std::string>* known =
      new std::set<std::string>{"float32", "float64", "bfloat16", "float16", "int64", "int32"};
  return known->count(dtype) > 0;
}

absl::StatusOr<std::unique_ptr<TensorFile>> ReadTensorFile(const std::string& path) {
  std::string prefix = path;
  for (absl::string_view ext : {".json", ".bin"}) {
    if (absl::EndsWith(prefix, ext)) prefix.resize(prefix.size() - ext.size());
  }
  auto file = std::make_unique<TensorFile>();
  file->json_path = prefix + ".json";
  const std::string bin_path = prefix + ".bin";
  MAGI_ASSIGN_OR_RETURN(std::string index_text, ReadFile(file->json_path));
  MAGI_ASSIGN_OR_RETURN(file->bin, ReadFile(bin_path));
  const std::string& where = file->json_path;
  auto bad = [&](const std::string& what) { return absl::InvalidArgumentError(absl::StrCat(where, ": ", what)); };

  absl::StatusOr<Json> parsed = JsonParser(index_text).ParseDocument();
  if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ":", parsed.status().message()));
  const JsonObject* root = std::get_if<JsonObject>(&parsed->value);
  if (root == nullptr) return bad("the index is not a JSON object");
  auto format = root->find("format");
  if (format == root->end() || std::get_if<std::string>(&format->second.value) == nullptr ||
      std::get<std::string>(format->second.value) != "magi-tensors-v1") {
    return bad("not a magi-tensors-v1 index (\"format\" must be \"magi-tensors-v1\")");
  }
  auto entries = root->find("tensors");
  const JsonArray* list = entries == root->end() ? nullptr : std::get_if<JsonArray>(&entries->second.value);
  if (list == nullptr) return bad("\"tensors\" must be a list");

  std::set<std::string> names;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // [offset, end) of each tensor
  const int64_t bin_size = static_cast<int64_t>(file->bin.size());
  for (size_t i = 0; i < list->size(); ++i) {
    const JsonObject* entry = std::get_if<JsonObject>(&(*list)[i].value);
    std::string label = absl::StrCat("tensor ", i);
    if (entry == nullptr) return bad(absl::StrCat(label, " is not an object"));
    auto field = [&](const char* key) -> const Json* {
      auto it = entry->find(key);
      return it == entry->end() ? nullptr : &it->second;
    };
    const Json* name = field("name");
    if (name == nullptr || std::get_if<std::string>(&name->value) == nullptr) {
      return bad(absl::StrCat(label, " has no string \"name\""));
    }
    RawTensor tensor;
    tensor.name = std::get<std::string>(name->value);
    label = absl::StrCat("tensor '", tensor.name, "'");
    if (!names.insert(tensor.name).second) return bad(absl::StrCat(label, " appears twice"));
    const Json* dtype = field("dtype");
    if (dtype == nullptr || std::get_if<std::string>(&dtype->value) == nullptr ||
        !IsTensorFileDType(std::get<std::string>(dtype->value))) {
      return bad(absl::StrCat(label, " has no known \"dtype\" (float32, float64, bfloat16, float16, int64, int32)"));
    }
    tensor.dtype = std::get<std::string>(dtype->value);
    const Json* shape = field("shape");
    const JsonArray* dims = shape == nullptr ? nullptr : std::get_if<JsonArray>(&shape->value);
    if (dims == nullptr) return bad(absl::StrCat(label, " has no \"shape\" list"));
    int64_t elements = 1;
    for (const Json& dim : *dims) {
      const int64_t* size = AsInt(dim);
      if (size == nullptr || *size < 0) return bad(absl::StrCat(label, " has a shape entry that is not a size >= 0"));
      std::optional<int64_t> product = CheckedMul(elements, *size);
      if (!product) return bad(absl::StrCat(label, " has too many elements"));
      elements = *product;
      tensor.shape.push_back(*size);
    }
    const Json* offset = field("offset");
    const Json* nbytes = field("nbytes");
    if (offset == nullptr || AsInt(*offset) == nullptr || *AsInt(*offset) < 0 || nbytes == nullptr ||
        AsInt(*nbytes) == nullptr) {
      return bad(absl::StrCat(label, " needs integer \"offset\" >= 0 and \"nbytes\""));
    }
    std::optional<int64_t> byte_count = CheckedMul(elements, DTypeSize(tensor.dtype));
    const int64_t expected = byte_count.value_or(-1);
    if (!byte_count || *AsInt(*nbytes) != expected) {
      return bad(absl::StrCat(label, " has nbytes ", *AsInt(*nbytes), ", not ", expected, " (", elements,
                              " elements of ", tensor.dtype, ")"));
    }
    const int64_t begin = *AsInt(*offset);
    std::optional<int64_t> end_or = CheckedAdd(begin, expected);
    const int64_t end = end_or.value_or(-1);
    if (!end_or || end > bin_size) {
      return bad(absl::StrCat(label, " ends at byte ", begin, " + ", expected, ", past the end of ", bin_path, " (",
                              bin_size, " bytes)"));
    }
    tensor.bytes = absl::string_view(file->bin).substr(static_cast<size_t>(begin), static_cast<size_t>(expected));
    if (expected > 0) ranges.emplace_back(begin, end);
    file->tensors.push_back(std::move(tensor));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) {
      return bad(absl::StrCat("two tensors overlap at bytes ", ranges[i].first, "..", ranges[i - 1].second));
    }
  }
  return file;
}

}  // namespace magi
