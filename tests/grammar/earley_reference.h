// An Earley recognizer over a compiled Grammar's rules: the independent
// reference the matcher is checked against. Slow and simple on purpose.
#pragma once

#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "model/grammar/grammar.h"

namespace attn::grammar::testing {

class EarleyReference {
 public:
  explicit EarleyReference(const Grammar& g) : g_(g) {
    nullable_.assign(g.rule_count(), false);
    for (bool changed = true; changed;) {
      changed = false;
      for (uint32_t r = 0; r < g.rule_count(); ++r) {
        if (nullable_[r]) continue;
        auto [first, last] = g.alternatives(r);
        for (uint32_t a = first; a < last && !nullable_[r]; ++a) {
          bool all = true;
          for (uint32_t i = g.alternative_start(a); all; ++i) {
            const Element& e = g.element(i);
            if (e.kind == Element::Kind::kAlt || e.kind == Element::Kind::kEnd) break;
            all = e.kind == Element::Kind::kRef && nullable_[e.value];
          }
          if (all) nullable_[r] = changed = true;
        }
      }
    }
  }

  // Whether `bytes` can be continued into a sentence (or is one), and
  // whether it is a whole sentence.
  void Check(const std::string& bytes, bool* viable, bool* complete) const {
    using Item = std::tuple<uint32_t, uint32_t, size_t>;  // rule, dot, origin
    std::vector<std::set<Item>> chart(bytes.size() + 1);
    auto [first, last] = g_.alternatives(g_.root());
    for (uint32_t a = first; a < last; ++a)
      chart[0].insert({g_.root(), g_.alternative_start(a), 0});
    *viable = *complete = false;
    for (size_t k = 0; k <= bytes.size(); ++k) {
      std::vector<Item> work(chart[k].begin(), chart[k].end());
      auto add = [&](const Item& item) {
        if (chart[k].insert(item).second) work.push_back(item);
      };
      while (!work.empty()) {
        const auto [rule, dot, origin] = work.back();
        work.pop_back();
        const Element& e = g_.element(dot);
        if (e.kind == Element::Kind::kAlt || e.kind == Element::Kind::kEnd) {
          if (k == bytes.size() && rule == g_.root() && origin == 0) *complete = true;
          for (const auto& [r2, d2, o2] : std::set<Item>(chart[origin])) {
            const Element& w = g_.element(d2);
            if (w.kind == Element::Kind::kRef && w.value == rule) add({r2, d2 + 1, o2});
          }
        } else if (e.kind == Element::Kind::kRef) {
          auto [f, l] = g_.alternatives(e.value);
          for (uint32_t a = f; a < l; ++a) add({e.value, g_.alternative_start(a), k});
          if (nullable_[e.value]) add({rule, dot + 1, origin});
        } else if (k < bytes.size()) {
          if (g_.byte_set(e.value).test(static_cast<uint8_t>(bytes[k]))) {
            chart[k + 1].insert({rule, dot + 1, origin});
          }
        } else {
          *viable = true;
        }
      }
      if (k < bytes.size() && chart[k + 1].empty()) return;
    }
    *viable = *viable || *complete;
  }

 private:
  const Grammar& g_;
  std::vector<bool> nullable_;
};

}  // namespace attn::grammar::testing
