// UTF-8 validation (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF),
// the same rule protobuf applies to `string` fields. Names and strings of the IR must be
// valid UTF-8, or a module could be written to protobuf that no reader accepts.
//
//   size_t ok = ValidUtf8Prefix(text);   // text.size() when all of it is valid
#ifndef MAGI_BASE_UTF8_H_
#define MAGI_BASE_UTF8_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace magi {

// The length of the longest prefix of `text` that is valid UTF-8: the offset of the
// first byte of the first invalid sequence, or text.size().
inline size_t ValidUtf8Prefix(absl::string_view text) {
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char lead = static_cast<unsigned char>(text[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    size_t length = 0;
    unsigned char low = 0x80, high = 0xbf;  // allowed range of the second byte
    if (lead >= 0xc2 && lead <= 0xdf) {
      length = 2;
    } else if (lead >= 0xe0 && lead <= 0xef) {
      length = 3;
      if (lead == 0xe0) low = 0xa0;   // overlong
      if (lead == 0xed) high = 0x9f;  // surrogates
    } else if (lead >= 0xf0 && lead <= 0xf4) {
      length = 4;
      if (lead == 0xf0) low = 0x90;   // overlong
      if (lead == 0xf4) high = 0x8f;  // past U+10FFFF
    } else {
      return i;  // a continuation byte, an overlong lead (0xc0, 0xc1) or 0xf5..0xff
    }
    if (i + length > n) return i;
    const unsigned char second = static_cast<unsigned char>(text[i + 1]);
    if (second < low || second > high) return i;
    for (size_t k = 2; k < length; ++k) {
      const unsigned char next = static_cast<unsigned char>(text[i + k]);
      if (next < 0x80 || next > 0xbf) return i;
    }
    i += length;
  }
  return n;
}

inline bool IsValidUtf8(absl::string_view text) { return ValidUtf8Prefix(text) == text.size(); }

}  // namespace magi

#endif  // MAGI_BASE_UTF8_H_
