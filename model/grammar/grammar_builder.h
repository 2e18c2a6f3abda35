// Building a Grammar from rules over code points (what the GBNF parser
// produces): character classes become UTF-8 byte sequences, rules are
// flattened, references resolved and left recursion refused.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/grammar/grammar.h"

namespace attn::grammar {

// Inclusive code point ranges, sorted, disjoint, without surrogates.
using CodeRanges = std::vector<std::pair<uint32_t, uint32_t>>;

// `ranges` sorted and merged; with `negate`, everything else up to
// U+10FFFF. Surrogates are always left out.
CodeRanges NormalizeRanges(CodeRanges ranges, bool negate);

class GrammarBuilder {
 public:
  struct Item {
    bool is_ref = false;
    uint32_t rule = 0;  // is_ref
    CodeRanges chars;   // otherwise: one character of these
  };
  using Sequence = std::vector<Item>;

  explicit GrammarBuilder(const GrammarLimits& limits) : limits_(limits) {}

  // The rule of that name, declared by its first use or definition.
  uint32_t RuleId(absl::string_view name);
  // A fresh rule for a group or repetition inside rule `parent_name`.
  uint32_t NewRule(absl::string_view parent_name);
  // kInvalidArgument when the rule already has alternatives.
  absl::Status Define(uint32_t rule, std::vector<Sequence> alternatives, int line);
  // `item` repeated min to max times (max -1: unbounded), as items.
  absl::StatusOr<Sequence> Repeat(const Item& item, int64_t min, int64_t max,
                                  absl::string_view parent_name);
  // Counts elements as they are added, against limits.max_elements.
  absl::Status Charge(int64_t elements);

  absl::StatusOr<Grammar> Build();

 private:
  absl::Status CheckLeftRecursion(const Grammar& grammar) const;
  static void SetByteClasses(Grammar* grammar);
  uint32_t ByteSetIndex(const ByteSet& set, Grammar* grammar);
  absl::Status Lower(const Sequence& sequence, std::vector<Element>* out, Grammar* grammar);
  uint32_t ClassRule(const CodeRanges& chars, Grammar* grammar);

  GrammarLimits limits_;
  std::vector<std::string> names_;
  std::vector<std::vector<Sequence>> rules_;
  std::vector<bool> defined_;
  std::vector<int> lines_;  // where each rule was first used
  std::unordered_map<std::string, uint32_t> by_name_;
  std::unordered_map<std::string, uint32_t> byte_set_index_;
  std::vector<std::vector<std::vector<Element>>> class_rules_;  // lowered extra rules
  std::unordered_map<std::string, uint32_t> class_rule_index_;
  int64_t elements_ = 0;
  int anonymous_ = 0;
};

}  // namespace attn::grammar
