#include "model/grammar/grammar_builder.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace attn::grammar {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

void RemoveSurrogates(CodeRanges* ranges) {
  CodeRanges out;
  for (auto [lo, hi] : *ranges) {
    if (hi < 0xD800 || lo > 0xDFFF) {
      out.emplace_back(lo, hi);
      continue;
    }
    if (lo < 0xD800) out.emplace_back(lo, 0xD7FF);
    if (hi > 0xDFFF) out.emplace_back(0xE000, hi);
  }
  *ranges = std::move(out);
}

std::string Utf8Encode(uint32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

// The UTF-8 encodings of [lo, hi] as sequences of byte ranges, each
// sequence a run of encodings with equal length whose bytes vary
// independently (the split Russ Cox's utf8-ranges describes).
using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;
void SplitUtf8(uint32_t lo, uint32_t hi, std::vector<ByteRanges>* out) {
  for (uint32_t border : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= border && hi > border) {
      SplitUtf8(lo, border, out);
      SplitUtf8(border + 1, hi, out);
      return;
    }
  }
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        SplitUtf8(lo, lo | m, out);
        SplitUtf8((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        SplitUtf8(lo, (hi & ~m) - 1, out);
        SplitUtf8(hi & ~m, hi, out);
        return;
      }
    }
  }
  const std::string a = Utf8Encode(lo), b = Utf8Encode(hi);
  ByteRanges ranges;
  for (size_t i = 0; i < a.size(); ++i) {
    ranges.emplace_back(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]));
  }
  out->push_back(std::move(ranges));
}

ByteSet RangeSet(uint8_t lo, uint8_t hi) {
  ByteSet set;
  for (int b = lo; b <= hi; ++b) set.set(b);
  return set;
}

}  // namespace

CodeRanges NormalizeRanges(CodeRanges ranges, bool negate) {
  std::sort(ranges.begin(), ranges.end());
  CodeRanges merged;
  for (auto [lo, hi] : ranges) {
    if (!merged.empty() && lo <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, hi);
    } else {
      merged.emplace_back(lo, hi);
    }
  }
  if (negate) {
    CodeRanges complement;
    uint32_t next = 0;
    for (auto [lo, hi] : merged) {
      if (lo > next) complement.emplace_back(next, lo - 1);
      next = hi + 1;
    }
    if (next <= kMaxCodePoint) complement.emplace_back(next, kMaxCodePoint);
    merged = std::move(complement);
  }
  RemoveSurrogates(&merged);
  return merged;
}

uint32_t GrammarBuilder::RuleId(absl::string_view name) {
  auto it = by_name_.find(std::string(name));
  if (it != by_name_.end()) return it->second;
  const auto id = static_cast<uint32_t>(names_.size());
  names_.emplace_back(name);
  rules_.emplace_back();
  defined_.push_back(false);
  lines_.push_back(0);
  by_name_.emplace(std::string(name), id);
  return id;
}

uint32_t GrammarBuilder::NewRule(absl::string_view parent_name) {
  // Names with a character GBNF names cannot have never collide.
  return RuleId(absl::StrCat(parent_name, "~", ++anonymous_));
}

absl::Status GrammarBuilder::Charge(int64_t elements) {
  elements_ += elements;
  if (elements_ > limits_.max_elements) {
    return absl::InvalidArgumentError(absl::StrCat("grammar: more than ", limits_.max_elements,
                                                   " elements once repetitions are expanded"));
  }
  return absl::OkStatus();
}

absl::Status GrammarBuilder::Define(uint32_t rule, std::vector<Sequence> alternatives, int line) {
  if (defined_[rule]) {
    return absl::InvalidArgumentError(
        absl::StrCat("grammar line ", line, ": rule '", names_[rule], "' is defined twice"));
  }
  int64_t count = 0;
  for (const auto& s : alternatives) count += static_cast<int64_t>(s.size()) + 1;
  if (auto status = Charge(count); !status.ok()) return status;
  defined_[rule] = true;
  lines_[rule] = line;
  rules_[rule] = std::move(alternatives);
  return absl::OkStatus();
}

absl::StatusOr<GrammarBuilder::Sequence> GrammarBuilder::Repeat(const Item& item, int64_t min,
                                                                int64_t max,
                                                                absl::string_view parent_name) {
  if (min > limits_.max_repetition || max > limits_.max_repetition) {
    return absl::InvalidArgumentError(
        absl::StrCat("grammar: a repetition bound above ", limits_.max_repetition));
  }
  Sequence out(static_cast<size_t>(min), item);
  if (auto status = Charge(min); !status.ok()) return status;
  if (max < 0) {  // tail: R ::= item R | ""
    const uint32_t rule = NewRule(parent_name);
    rules_[rule] = {{item, Item{true, rule, {}}}, {}};
    defined_[rule] = true;
    if (auto status = Charge(4); !status.ok()) return status;
    out.push_back(Item{true, rule, {}});
    return out;
  }
  // Nested optionals: O1 ::= item | "", Ok ::= item O(k-1) | "".
  int64_t previous = -1;
  for (int64_t k = 0; k < max - min; ++k) {
    const uint32_t rule = NewRule(parent_name);
    Sequence first{item};
    if (previous >= 0) first.push_back(Item{true, static_cast<uint32_t>(previous), {}});
    rules_[rule] = {std::move(first), {}};
    defined_[rule] = true;
    if (auto status = Charge(4); !status.ok()) return status;
    previous = rule;
  }
  if (previous >= 0) out.push_back(Item{true, static_cast<uint32_t>(previous), {}});
  return out;
}

uint32_t GrammarBuilder::ByteSetIndex(const ByteSet& set, Grammar* grammar) {
  const std::string key = set.to_string();
  auto [it, added] =
      byte_set_index_.emplace(key, static_cast<uint32_t>(grammar->byte_sets_.size()));
  if (added) grammar->byte_sets_.push_back(set);
  return it->second;
}

// A rule (numbered after the named ones) matching one character of `chars`.
uint32_t GrammarBuilder::ClassRule(const CodeRanges& chars, Grammar* grammar) {
  std::string key;
  for (auto [lo, hi] : chars) absl::StrAppend(&key, lo, "-", hi, ",");
  auto it = class_rule_index_.find(key);
  if (it != class_rule_index_.end()) return it->second;
  std::vector<ByteRanges> sequences;
  for (auto [lo, hi] : chars) SplitUtf8(lo, hi, &sequences);
  std::vector<std::vector<Element>> alternatives;
  ByteSet single;
  for (const auto& seq : sequences) {
    if (seq.size() == 1) {
      single |= RangeSet(seq[0].first, seq[0].second);
      continue;
    }
    std::vector<Element> alt;
    for (auto [lo, hi] : seq) {
      alt.push_back({Element::Kind::kBytes, ByteSetIndex(RangeSet(lo, hi), grammar)});
    }
    alternatives.push_back(std::move(alt));
  }
  if (single.any())
    alternatives.push_back({{Element::Kind::kBytes, ByteSetIndex(single, grammar)}});
  const auto id = static_cast<uint32_t>(rules_.size() + class_rules_.size());
  class_rules_.push_back(std::move(alternatives));
  class_rule_index_.emplace(key, id);
  return id;
}

absl::Status GrammarBuilder::Lower(const Sequence& sequence, std::vector<Element>* out,
                                   Grammar* grammar) {
  for (const Item& item : sequence) {
    if (item.is_ref) {
      out->push_back({Element::Kind::kRef, item.rule});
    } else if (item.chars.size() == 1 && item.chars[0].first == item.chars[0].second) {
      for (char c : Utf8Encode(item.chars[0].first)) {
        ByteSet set;
        set.set(static_cast<uint8_t>(c));
        out->push_back({Element::Kind::kBytes, ByteSetIndex(set, grammar)});
      }
    } else if (!item.chars.empty() && item.chars.back().second < 0x80) {
      ByteSet set;
      for (auto [lo, hi] : item.chars) set |= RangeSet(lo, hi);
      out->push_back({Element::Kind::kBytes, ByteSetIndex(set, grammar)});
    } else {
      out->push_back({Element::Kind::kRef, ClassRule(item.chars, grammar)});
    }
  }
  return Charge(static_cast<int64_t>(out->size()));
}

absl::StatusOr<Grammar> GrammarBuilder::Build() {
  auto root = by_name_.find("root");
  if (root == by_name_.end() || !defined_[root->second]) {
    return absl::InvalidArgumentError("grammar: no rule named 'root' (the start rule)");
  }
  for (size_t r = 0; r < names_.size(); ++r) {
    if (!defined_[r]) {
      return absl::InvalidArgumentError(
          absl::StrCat("grammar: rule '", names_[r], "' is used but never defined"));
    }
  }
  Grammar grammar;
  grammar.root_ = root->second;
  std::vector<std::vector<std::vector<Element>>> lowered(rules_.size());
  for (size_t r = 0; r < rules_.size(); ++r) {
    for (const Sequence& seq : rules_[r]) {
      lowered[r].emplace_back();
      if (auto status = Lower(seq, &lowered[r].back(), &grammar); !status.ok()) return status;
    }
  }
  grammar.rule_names_ = names_;
  for (auto& extra : class_rules_) {
    lowered.push_back(std::move(extra));
    grammar.rule_names_.push_back("[class]");
  }
  for (auto& alternatives : lowered) {
    grammar.rule_starts_.push_back(static_cast<uint32_t>(grammar.elements_.size()));
    grammar.alternative_offsets_.push_back(
        static_cast<uint32_t>(grammar.alternative_starts_.size()));
    if (alternatives.empty()) alternatives.emplace_back();  // a rule with no alternative: ""
    for (size_t a = 0; a < alternatives.size(); ++a) {
      grammar.alternative_starts_.push_back(static_cast<uint32_t>(grammar.elements_.size()));
      grammar.elements_.insert(grammar.elements_.end(), alternatives[a].begin(),
                               alternatives[a].end());
      const bool last = a + 1 == alternatives.size();
      grammar.elements_.push_back({last ? Element::Kind::kEnd : Element::Kind::kAlt, 0});
    }
  }
  grammar.alternative_offsets_.push_back(static_cast<uint32_t>(grammar.alternative_starts_.size()));
  if (auto status = CheckLeftRecursion(grammar); !status.ok()) return status;
  SetByteClasses(&grammar);
  return grammar;
}

void GrammarBuilder::SetByteClasses(Grammar* g) {
  // Partition refinement: every set splits the classes it cuts.
  std::vector<ByteSet> classes{ByteSet().set()};
  for (const ByteSet& set : g->byte_sets_) {
    const size_t n = classes.size();
    for (size_t c = 0; c < n; ++c) {
      const ByteSet in = classes[c] & set, out = classes[c] & ~set;
      if (in.none() || out.none()) continue;
      classes[c] = in;
      classes.push_back(out);
    }
  }
  for (size_t c = 0; c < classes.size(); ++c) {
    for (int b = 0; b < 256; ++b) {
      if (classes[c].test(b)) g->byte_classes_[b] = static_cast<uint8_t>(c);
    }
  }
  g->class_count_ = static_cast<int>(classes.size());
}

// A rule that can reach itself before matching a byte would make a top-down
// matcher expand forever.
absl::Status GrammarBuilder::CheckLeftRecursion(const Grammar& g) const {
  const size_t n = g.rule_count();
  auto alternatives = [&](uint32_t r, const std::function<void(uint32_t, uint32_t)>& visit) {
    uint32_t start = g.rule_start(r);
    for (uint32_t i = start;; ++i) {
      const Element& e = g.element(i);
      if (e.kind == Element::Kind::kAlt || e.kind == Element::Kind::kEnd) {
        visit(start, i);
        if (e.kind == Element::Kind::kEnd) return;
        start = i + 1;
      }
    }
  };
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      alternatives(r, [&](uint32_t begin, uint32_t end) {
        bool all = true;
        for (uint32_t i = begin; i < end && all; ++i) {
          const Element& e = g.element(i);
          all = e.kind == Element::Kind::kRef && nullable[e.value];
        }
        if (all && !nullable[r]) nullable[r] = changed = true;
      });
    }
  }
  // Rules reachable before any byte; `tail`: the reference ends its
  // alternative, so the matcher reuses the caller's frame there.
  struct Edge {
    uint32_t to;
    bool tail;
  };
  std::vector<std::vector<Edge>> left(n);
  for (uint32_t r = 0; r < n; ++r) {
    alternatives(r, [&](uint32_t begin, uint32_t end) {
      for (uint32_t i = begin; i < end; ++i) {
        const Element& e = g.element(i);
        if (e.kind != Element::Kind::kRef) break;
        left[r].push_back({e.value, i + 1 == end});
        if (!nullable[e.value]) break;
      }
    });
  }
  // A cycle of tail references only (a repetition of something that can
  // match nothing) keeps one frame: harmless. A cycle through any other
  // reference grows the stack forever: a non-tail edge inside a strongly
  // connected component. Tarjan's algorithm, without recursion (grammars
  // are untrusted input).
  std::vector<int64_t> index(n, -1), low(n, 0), component(n, -1);
  std::vector<uint32_t> stack;
  std::vector<bool> on_stack(n, false);
  int64_t counter = 0, components = 0;
  for (uint32_t start = 0; start < n; ++start) {
    if (index[start] >= 0) continue;
    std::vector<std::pair<uint32_t, size_t>> calls{{start, 0}};
    index[start] = low[start] = counter++;
    stack.push_back(start);
    on_stack[start] = true;
    while (!calls.empty()) {
      const uint32_t v = calls.back().first;
      if (calls.back().second < left[v].size()) {
        const uint32_t w = left[v][calls.back().second++].to;
        if (index[w] < 0) {
          index[w] = low[w] = counter++;
          stack.push_back(w);
          on_stack[w] = true;
          calls.emplace_back(w, 0);
        } else if (on_stack[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      if (low[v] == index[v]) {
        uint32_t x = 0;
        do {
          x = stack.back();
          stack.pop_back();
          on_stack[x] = false;
          component[x] = components;
        } while (x != v);
        ++components;
      }
      calls.pop_back();
      if (!calls.empty()) low[calls.back().first] = std::min(low[calls.back().first], low[v]);
    }
  }
  for (uint32_t r = 0; r < n; ++r) {
    for (const Edge& e : left[r]) {
      if (e.tail || component[e.to] != component[r]) continue;
      std::string name = g.rule_name(r);
      name = name.substr(0, name.find('~'));
      return absl::InvalidArgumentError(
          absl::StrCat("grammar: rule '", name,
                       "' is left-recursive (it can reach itself before any character)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace attn::grammar
