// UTF-8 as RFC 3629 defines it: the one validator every layer uses (request
// validation, the tokenizer's incremental decoder, stop strings).
//
// Valid means: no overlong forms, no surrogates (U+D800..U+DFFF), nothing
// past U+10FFFF, no stray continuation bytes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace attn {

// What starts at an offset of a byte string.
struct Utf8Char {
  enum class Kind {
    kComplete,    // a whole valid character of `length` bytes
    kIncomplete,  // a valid start of a character that the string cuts off
    kInvalid,     // `length` bytes (at least 1) that no valid character starts with
  };
  Kind kind;
  size_t length;
};

// Classifies the bytes of `text` from offset `at` (at < text.size()). An
// invalid sequence is as long as its longest valid-looking prefix (at least
// one byte), the "maximal subpart" that Unicode replaces by one U+FFFD.
Utf8Char ScanUtf8(std::string_view text, size_t at);

// Whether `text` is entirely valid UTF-8.
bool IsValidUtf8(std::string_view text);

// Length of the longest prefix of `bytes` made of whole characters, which is
// appended to `out` with each invalid sequence replaced by U+FFFD; an
// unfinished character at the end is left out (and stays in `bytes` from the
// returned offset).
size_t TakeCompleteUtf8(std::string_view bytes, std::string* out);

}  // namespace attn
