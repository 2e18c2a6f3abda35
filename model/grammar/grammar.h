// A context-free grammar over bytes, compiled from GBNF text: the one form
// every constraint of structured output (JSON Schema, regular expressions,
// choices, grammars a client writes) becomes before decoding.
//
// GBNF is the grammar format llama.cpp documents (grammars/README.md):
//   rule-name ::= alternative | alternative   # comment
// with "literals" and [character classes] ([^...] negated, a-z ranges,
// \n \t \r \\ \" \xHH \uHHHH \UHHHHHHHH escapes), `.` (any character),
// rule references, ( groups ) and the postfix operators * + ? {m} {m,}
// {m,n}. A rule ends where the next `name ::=` starts. `root` is the start.
//
// Characters are Unicode code points; the compiled grammar matches their
// UTF-8 bytes, so a token that ends inside a character (a byte-level
// vocabulary's byte tokens) is matched exactly. Repetitions become right-
// recursive rules, which the matcher runs in constant stack depth.
//
// Grammars are untrusted input: the text, the number of rules and elements
// and a repetition's bound are limited, and left recursion (which no
// top-down matcher can run) is refused, each with an error naming the line
// or rule.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attn::grammar {

struct GrammarLimits {
  size_t max_text_bytes = 256 * 1024;  // GBNF text
  int64_t max_elements = 200000;       // after repetitions are expanded
  int64_t max_repetition = 1000;       // the largest m or n of {m,n}
  int64_t max_nesting = 64;            // parentheses inside parentheses
};

// One element of an alternative.
struct Element {
  enum class Kind : uint8_t {
    kEnd,    // ends a rule's last alternative
    kAlt,    // ends an alternative; the next one starts after it
    kBytes,  // one byte of the set byte_sets[value]
    kRef,    // the rule `value`
  };
  Kind kind;
  uint32_t value;
};

using ByteSet = std::bitset<256>;

class Grammar {
 public:
  // Compiles GBNF text. kInvalidArgument naming the line and what is wrong,
  // an undefined rule, a left-recursive rule, a missing `root`, or a limit.
  static absl::StatusOr<Grammar> FromGbnf(absl::string_view text, const GrammarLimits& limits = {});

  // Element i of the flat array; rule r's first alternative starts at
  // rule_start(r), each alternative ends with kAlt, the last with kEnd.
  const Element& element(uint32_t i) const { return elements_[i]; }
  uint32_t rule_start(uint32_t rule) const { return rule_starts_[rule]; }
  const ByteSet& byte_set(uint32_t index) const { return byte_sets_[index]; }
  // Where each alternative of `rule` starts: [first, last) into
  // alternative_starts().
  std::pair<uint32_t, uint32_t> alternatives(uint32_t rule) const {
    return {alternative_offsets_[rule], alternative_offsets_[rule + 1]};
  }
  uint32_t alternative_start(uint32_t i) const { return alternative_starts_[i]; }
  uint32_t root() const { return root_; }
  size_t element_count() const { return elements_.size(); }
  size_t rule_count() const { return rule_starts_.size(); }
  const std::string& rule_name(uint32_t rule) const { return rule_names_[rule]; }
  // Bytes that no byte set tells apart share a class: a matcher's step on
  // one is its step on all (classes number at most 256).
  uint8_t byte_class(uint8_t byte) const { return byte_classes_[byte]; }
  int class_count() const { return class_count_; }

 private:
  friend class GrammarBuilder;
  std::vector<Element> elements_;
  std::vector<uint32_t> rule_starts_;
  std::vector<std::string> rule_names_;
  std::vector<ByteSet> byte_sets_;
  std::vector<uint32_t> alternative_offsets_;  // per rule, and one past the last
  std::vector<uint32_t> alternative_starts_;
  uint32_t root_ = 0;
  uint8_t byte_classes_[256] = {};
  int class_count_ = 1;
};

// GBNF literal text for `text` (quoted, with escapes), for generators that
// write GBNF (JSON Schema, regular expressions, choices).
std::string GbnfLiteral(absl::string_view text);

}  // namespace attn::grammar
