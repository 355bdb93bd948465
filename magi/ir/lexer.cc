#include "magi/ir/lexer.h"

#include <cerrno>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "magi/base/utf8.h"

namespace magi::ir_text {
namespace {

bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameChar(char c) { return IsAlpha(c) || IsDigit(c) || c == '.'; }
int HexValue(char c) {
  if (IsDigit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

absl::string_view TokenKindName(TokenKind kind) {
  switch (kind) {
    case TokenKind::kEnd:
      return "end of input";
    case TokenKind::kError:
      return "invalid token";
    case TokenKind::kIdentifier:
      return "identifier";
    case TokenKind::kValueName:
      return "%value";
    case TokenKind::kSymbolName:
      return "@symbol";
    case TokenKind::kInteger:
      return "integer";
    case TokenKind::kFloat:
      return "float";
    case TokenKind::kString:
      return "string";
    case TokenKind::kLParen:
      return "'('";
    case TokenKind::kRParen:
      return "')'";
    case TokenKind::kLBrace:
      return "'{'";
    case TokenKind::kRBrace:
      return "'}'";
    case TokenKind::kLBracket:
      return "'['";
    case TokenKind::kRBracket:
      return "']'";
    case TokenKind::kLAngle:
      return "'<'";
    case TokenKind::kRAngle:
      return "'>'";
    case TokenKind::kComma:
      return "','";
    case TokenKind::kEqual:
      return "'='";
    case TokenKind::kColon:
      return "':'";
    case TokenKind::kQuestion:
      return "'?'";
  }
  return "token";
}

void Lexer::Advance() {
  if (pos_ >= input_.size()) return;
  if (input_[pos_] == '\n') {
    ++line_;
    column_ = 1;
  } else {
    ++column_;
  }
  ++pos_;
}

void Lexer::SkipSpaceAndComments() {
  while (pos_ < input_.size()) {
    char c = Peek();
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      Advance();
    } else if (c == '/' && Peek(1) == '/') {
      while (pos_ < input_.size() && Peek() != '\n') Advance();
    } else {
      return;
    }
  }
}

Token Lexer::MakeError(SourceLocation location, std::string reason) {
  Token token;
  token.kind = TokenKind::kError;
  token.text = std::move(reason);
  token.location = location;
  // Skip the rest of the input: the parser stops at the first error anyway.
  while (pos_ < input_.size()) Advance();
  return token;
}

std::string Lexer::LexBareName() {
  std::string name;
  while (IsNameChar(Peek())) {
    name += Peek();
    Advance();
  }
  return name;
}

bool Lexer::LexQuoted(std::string* out, std::string* error, SourceLocation* error_location) {
  Advance();  // opening quote
  // Where each byte of `out` came from (a raw byte or the escape that made it), to point
  // at the first byte that is not UTF-8.
  std::vector<SourceLocation> origins;
  while (true) {
    if (pos_ >= input_.size() || Peek() == '\n') {
      *error = "unterminated string";
      return false;
    }
    SourceLocation origin{line_, column_};
    char c = Peek();
    Advance();
    if (c == '"') {
      size_t valid = ValidUtf8Prefix(*out);
      if (valid == out->size()) return true;
      *error = absl::StrFormat("quoted text is not valid UTF-8 (byte 0x%02x)", static_cast<unsigned char>((*out)[valid]));
      *error_location = origins[valid];
      return false;
    }
    if (c != '\\') {
      *out += c;
      origins.push_back(origin);
      continue;
    }
    char escape = Peek();
    Advance();
    switch (escape) {
      case '"':
      case '\\':
        *out += escape;
        break;
      case 'n':
        *out += '\n';
        break;
      case 't':
        *out += '\t';
        break;
      case 'x': {
        int hi = HexValue(Peek());
        int lo = HexValue(Peek(1));
        if (hi < 0 || lo < 0) {
          *error = "bad \\x escape (expected two hex digits)";
          return false;
        }
        Advance();
        Advance();
        *out += static_cast<char>(hi * 16 + lo);
        break;
      }
      default:
        *error = absl::StrCat("unknown escape '\\", std::string(1, escape), "'");
        return false;
    }
    origins.resize(out->size(), origin);  // the escape made the byte just added
  }
}

Token Lexer::LexNumber(SourceLocation location) {
  size_t start = pos_;
  if (Peek() == '-') Advance();
  if (IsAlpha(Peek())) {  // -inf
    std::string word = LexBareName();
    if (word != "inf") return MakeError(location, absl::StrCat("expected a number after '-', got '", word, "'"));
    Token token;
    token.kind = TokenKind::kFloat;
    token.float_value = -HUGE_VAL;
    token.location = location;
    return token;
  }
  if (!IsDigit(Peek())) return MakeError(location, "expected a digit after '-'");
  bool is_float = false;
  while (IsDigit(Peek())) Advance();
  if (Peek() == '.') {
    is_float = true;
    Advance();
    while (IsDigit(Peek())) Advance();
  }
  if (Peek() == 'e' || Peek() == 'E') {
    is_float = true;
    Advance();
    if (Peek() == '+' || Peek() == '-') Advance();
    if (!IsDigit(Peek())) return MakeError(location, "expected digits in the exponent");
    while (IsDigit(Peek())) Advance();
  }
  std::string text(input_.substr(start, pos_ - start));
  Token token;
  token.location = location;
  token.text = text;
  errno = 0;
  char* end = nullptr;
  if (is_float) {
    token.kind = TokenKind::kFloat;
    token.float_value = std::strtod(text.c_str(), &end);
  } else {
    token.kind = TokenKind::kInteger;
    token.int_value = std::strtoll(text.c_str(), &end, 10);
    if (errno == ERANGE) return MakeError(location, absl::StrCat("integer ", text, " is out of the int64 range"));
  }
  return token;
}

Token Lexer::Next() {
  SkipSpaceAndComments();
  Token token;
  token.location = {line_, column_};
  if (pos_ >= input_.size()) return token;
  char c = Peek();
  auto single = [&](TokenKind kind) {
    Advance();
    token.kind = kind;
    return token;
  };
  switch (c) {
    case '(':
      return single(TokenKind::kLParen);
    case ')':
      return single(TokenKind::kRParen);
    case '{':
      return single(TokenKind::kLBrace);
    case '}':
      return single(TokenKind::kRBrace);
    case '[':
      return single(TokenKind::kLBracket);
    case ']':
      return single(TokenKind::kRBracket);
    case '<':
      return single(TokenKind::kLAngle);
    case '>':
      return single(TokenKind::kRAngle);
    case ',':
      return single(TokenKind::kComma);
    case '=':
      return single(TokenKind::kEqual);
    case '?':
      return single(TokenKind::kQuestion);
    case ':':
      return single(TokenKind::kColon);
    case '"': {
      std::string error;
      SourceLocation where = token.location;
      if (!LexQuoted(&token.text, &error, &where)) return MakeError(where, error);
      token.kind = TokenKind::kString;
      return token;
    }
    case '%':
    case '@': {
      Advance();
      token.kind = c == '%' ? TokenKind::kValueName : TokenKind::kSymbolName;
      if (Peek() == '"') {  // quoted names may be any UTF-8 text, even empty
        std::string error;
        SourceLocation where = token.location;
        if (!LexQuoted(&token.text, &error, &where)) return MakeError(where, error);
        return token;
      }
      token.text = LexBareName();
      if (token.text.empty()) return MakeError(token.location, absl::StrCat("empty name after '", std::string(1, c), "'"));
      return token;
    }
    default:
      break;
  }
  if (IsDigit(c) || c == '-') return LexNumber(token.location);
  if (IsAlpha(c)) {
    // Identifiers may contain "::" between name parts: aten::add.Tensor.
    std::string text = LexBareName();
    while (Peek() == ':' && Peek(1) == ':' && IsAlpha(Peek(2))) {
      Advance();
      Advance();
      text += "::" + LexBareName();
    }
    token.kind = TokenKind::kIdentifier;
    token.text = std::move(text);
    return token;
  }
  unsigned char byte = static_cast<unsigned char>(c);
  return MakeError(token.location,
                   byte >= 0x20 && byte < 0x7f ? absl::StrCat("unexpected character '", std::string(1, c), "'")
                                               : absl::StrFormat("unexpected byte 0x%02x", byte));
}

}  // namespace magi::ir_text
