// Tokenizer for Magi's text IR (used by the parser; not a public API).
//
// Tokens: identifiers and op names ([A-Za-z_][A-Za-z0-9_.]* joined by "::"),
// %value and @symbol names (bare or quoted), integers, floats, strings with C-style
// escapes, and punctuation. Quoted names and strings must be valid UTF-8 once unescaped
// (protobuf requires it of every string). Comments run from "//" to the end of the line. Every
// token records its line and column (1-based) for error messages. The lexer never
// fails: bad characters become kError tokens that the parser reports.
#ifndef MAGI_IR_LEXER_H_
#define MAGI_IR_LEXER_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "magi/ir/node.h"

namespace magi::ir_text {

enum class TokenKind : uint8_t {
  kEnd,
  kError,       // text = the reason
  kIdentifier,  // module, graph, aten::mm, f32, none, true, inf, ...
  kValueName,   // %name (text = name without '%')
  kSymbolName,  // @name (text = name without '@')
  kInteger,
  kFloat,
  kString,  // text = unescaped contents
  kLParen,
  kRParen,
  kLBrace,
  kRBrace,
  kLBracket,
  kRBracket,
  kLAngle,
  kRAngle,
  kComma,
  kEqual,
  kColon,
  kQuestion,
};

absl::string_view TokenKindName(TokenKind kind);

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  SourceLocation location;
};

class Lexer {
 public:
  explicit Lexer(absl::string_view input) : input_(input) {}
  // The next token; kEnd forever once the input is consumed.
  Token Next();

 private:
  char Peek(size_t ahead = 0) const { return pos_ + ahead < input_.size() ? input_[pos_ + ahead] : '\0'; }
  void Advance();
  void SkipSpaceAndComments();
  Token MakeError(SourceLocation location, std::string reason);
  Token LexNumber(SourceLocation location);
  // Lexes "..." at the current position into `out`, unescaped. On failure returns false
  // with the reason; `error_location` is set where the problem is (invalid UTF-8: the
  // byte or escape that starts the bad sequence), else left alone.
  bool LexQuoted(std::string* out, std::string* error, SourceLocation* error_location);
  std::string LexBareName();

  absl::string_view input_;
  size_t pos_ = 0;
  int line_ = 1;
  int column_ = 1;
};

}  // namespace magi::ir_text

#endif  // MAGI_IR_LEXER_H_
