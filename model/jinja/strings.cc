#include "model/jinja/strings.h"

#include <algorithm>
#include <cctype>

namespace attn::jinja {
namespace {

std::string Ascii(const std::string& s, int (*f)(int)) {
  std::string out = s;
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(f(c));
  }
  return out;
}

}  // namespace

// UTF-8 code point boundaries of s (the start of each, then s.size()).
std::vector<size_t> CodePoints(const std::string& s) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) starts.push_back(i);
  }
  starts.push_back(s.size());
  return starts;
}

uint32_t DecodeAt(const std::string& s, size_t i, size_t* len) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  if (i + n > s.size()) n = 1;
  uint32_t code = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < n; ++k) code = (code << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  *len = static_cast<size_t>(n);
  return code;
}

// Python's str.isspace() for one code point.
bool IsPySpace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::string Upper(const std::string& s) { return Ascii(s, ::toupper); }
std::string Lower(const std::string& s) { return Ascii(s, ::tolower); }

std::string Capitalize(const std::string& s) {
  std::string out = Lower(s);
  if (!out.empty()) out[0] = static_cast<char>(::toupper(out[0]));
  return out;
}

// Python's str.title(): a letter after a non-letter starts a word.
std::string Title(const std::string& s) {
  std::string out = s;
  bool prev_letter = false;
  for (char& c : out) {
    bool letter = std::isalpha(static_cast<unsigned char>(c)) != 0;
    if (letter) c = static_cast<char>(prev_letter ? ::tolower(c) : ::toupper(c));
    prev_letter = letter || (static_cast<unsigned char>(c) >= 0x80);
  }
  return out;
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count) {
  if (from.empty()) {
    std::string out;
    std::vector<size_t> cps = CodePoints(s);
    int64_t done = 0;
    for (size_t i = 0; i + 1 < cps.size(); ++i) {
      if (count < 0 || done < count) out += to, ++done;
      out += s.substr(cps[i], cps[i + 1] - cps[i]);
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  std::string out;
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out += s.substr(pos, hit - pos) + to;
    pos = hit + from.size();
    ++done;
  }
  return out + s.substr(pos);
}

// Python's str.split(sep, maxsplit) and rsplit.
std::vector<std::string> Split(const std::string& s, const Value& sep, int64_t maxsplit,
                               bool from_right) {
  std::vector<std::string> parts;
  if (sep.is_string() && !sep.str().empty()) {
    const std::string& d = sep.str();
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        size_t hit = s.find(d, pos);
        if (hit == std::string::npos) break;
        parts.push_back(s.substr(pos, hit - pos));
        pos = hit + d.size();
      }
      parts.push_back(s.substr(pos));
      return parts;
    }
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      if (end < d.size()) break;
      size_t hit = s.rfind(d, end - d.size());
      if (hit == std::string::npos) break;
      parts.push_back(s.substr(hit + d.size(), end - hit - d.size()));
      end = hit;
    }
    parts.push_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
    return parts;
  }
  // Runs of white space, none empty; from_right with maxsplit is rare in
  // templates and splits from the left here.
  size_t i = 0;
  while (i < s.size()) {
    size_t len;
    while (i < s.size() && IsPySpace(DecodeAt(s, i, &len))) i += len;
    if (i >= s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      std::string rest = s.substr(i);
      parts.push_back(Strip(rest, Value(), false, true));
      break;
    }
    size_t start = i;
    while (i < s.size() && !IsPySpace(DecodeAt(s, i, &len))) i += len;
    parts.push_back(s.substr(start, i - start));
  }
  return parts;
}

std::string Strip(const std::string& s, const Value& chars, bool left, bool right) {
  std::vector<size_t> cps = CodePoints(s);
  auto strip_this = [&](size_t i) {
    std::string cp = s.substr(cps[i], cps[i + 1] - cps[i]);
    if (chars.is_string()) return chars.str().find(cp) != std::string::npos;
    size_t len;
    return IsPySpace(DecodeAt(s, cps[i], &len));
  };
  size_t begin = 0, end = cps.size() - 1;
  while (left && begin < end && strip_this(begin)) ++begin;
  while (right && end > begin && strip_this(end - 1)) --end;
  return s.substr(cps[begin], cps[end] - cps[begin]);
}

}  // namespace attn::jinja
