#include "util/utf8.h"

#include <cstdint>

namespace attn {
namespace {

constexpr char kReplacement[] = "\xef\xbf\xbd";  // U+FFFD

// The bytes a character starting with `lead` has, and the range its second
// byte must be in (RFC 3629, section 4); length 0 if `lead` starts none.
// Later bytes are always 0x80..0xBF.
struct LeadRule {
  size_t length;
  uint8_t second_min, second_max;
};

LeadRule RuleFor(uint8_t lead) {
  if (lead < 0x80) return {1, 0, 0};
  if (lead >= 0xC2 && lead <= 0xDF) return {2, 0x80, 0xBF};
  if (lead == 0xE0) return {3, 0xA0, 0xBF};  // no overlong forms
  if (lead == 0xED) return {3, 0x80, 0x9F};  // no surrogates
  if (lead >= 0xE1 && lead <= 0xEF) return {3, 0x80, 0xBF};
  if (lead == 0xF0) return {4, 0x90, 0xBF};  // no overlong forms
  if (lead >= 0xF1 && lead <= 0xF3) return {4, 0x80, 0xBF};
  if (lead == 0xF4) return {4, 0x80, 0x8F};  // nothing past U+10FFFF
  return {0, 0, 0};
}

}  // namespace

Utf8Char ScanUtf8(std::string_view text, size_t at) {
  const LeadRule rule = RuleFor(static_cast<uint8_t>(text[at]));
  if (rule.length == 0) return {Utf8Char::Kind::kInvalid, 1};
  for (size_t k = 1; k < rule.length; ++k) {
    if (at + k >= text.size()) return {Utf8Char::Kind::kIncomplete, k};
    const auto byte = static_cast<uint8_t>(text[at + k]);
    const uint8_t min = k == 1 ? rule.second_min : 0x80;
    const uint8_t max = k == 1 ? rule.second_max : 0xBF;
    if (byte < min || byte > max) return {Utf8Char::Kind::kInvalid, k};
  }
  return {Utf8Char::Kind::kComplete, rule.length};
}

bool IsValidUtf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const Utf8Char c = ScanUtf8(text, i);
    if (c.kind != Utf8Char::Kind::kComplete) return false;
    i += c.length;
  }
  return true;
}

size_t TakeCompleteUtf8(std::string_view bytes, std::string* out) {
  size_t i = 0;
  while (i < bytes.size()) {
    const Utf8Char c = ScanUtf8(bytes, i);
    if (c.kind == Utf8Char::Kind::kIncomplete) break;  // wait for more bytes
    if (c.kind == Utf8Char::Kind::kComplete) {
      out->append(bytes.substr(i, c.length));
    } else {
      out->append(kReplacement);
    }
    i += c.length;
  }
  return i;
}

}  // namespace attn
