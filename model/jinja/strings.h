// Python's str operations on UTF-8 text, as chat templates use them
// (str.strip, split, title, replace...; len and indexing by code point).
// Internal to model/jinja.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/jinja/value.h"

namespace attn::jinja {

// The start of each code point of s, then s.size().
std::vector<size_t> CodePoints(const std::string& s);
// The code point at byte i and its length in bytes.
uint32_t DecodeAt(const std::string& s, size_t i, size_t* len);
// Python's str.isspace() for one code point.
bool IsPySpace(uint32_t c);

// ASCII letters only change case, as most templates' text needs.
std::string Upper(const std::string& s);
std::string Lower(const std::string& s);
std::string Capitalize(const std::string& s);
std::string Title(const std::string& s);
// str.replace(from, to, count), count < 0 meaning all.
std::string Replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count);
// str.split(sep, maxsplit) and rsplit; sep undefined or None: white space.
std::vector<std::string> Split(const std::string& s, const Value& sep, int64_t maxsplit,
                               bool from_right);
// str.strip(chars), chars undefined or None meaning white space.
std::string Strip(const std::string& s, const Value& chars, bool left, bool right);

}  // namespace attn::jinja
