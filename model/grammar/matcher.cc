#include "model/grammar/matcher.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <unordered_map>
#include <utility>

namespace attn::grammar {
namespace {

// Interned entries a matcher may hold before it forgets all but its
// current state (a long generation through many distinct states).
constexpr size_t kMaxInterned = size_t{4} << 20;

// RFC 3629's UTF-8 as a decoder: state 0 at a character boundary, 1 to 7
// inside one (which continuation bytes may follow); -1 for bytes that can
// never be UTF-8.
int Utf8Next(int state, uint8_t b) {
  auto continuation = [b](uint8_t lo, uint8_t hi, int then) {
    return b >= lo && b <= hi ? then : -1;
  };
  switch (state) {
    case 0:
      if (b < 0x80) return 0;
      if (b >= 0xC2 && b <= 0xDF) return 1;
      if (b == 0xE0) return 4;
      if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return 2;
      if (b == 0xED) return 5;
      if (b == 0xF0) return 6;
      if (b >= 0xF1 && b <= 0xF3) return 3;
      return b == 0xF4 ? 7 : -1;
    case 1:
      return continuation(0x80, 0xBF, 0);
    case 2:
      return continuation(0x80, 0xBF, 1);
    case 3:
      return continuation(0x80, 0xBF, 2);
    case 4:
      return continuation(0xA0, 0xBF, 1);
    case 5:
      return continuation(0x80, 0x9F, 1);
    case 6:
      return continuation(0x90, 0xBF, 2);
    case 7:
      return continuation(0x80, 0x8F, 2);
    default:
      return -1;
  }
}

ByteSet Ascii() {
  ByteSet ascii;
  for (int b = 0; b < 0x80; ++b) ascii.set(b);
  return ascii;
}

uint64_t NodeKey(uint32_t pos, int32_t parent) {
  return (uint64_t{pos} << 32) | static_cast<uint32_t>(parent + 1);
}

}  // namespace

TokenTrie::TokenTrie(const std::vector<std::string>& tokens)
    : vocab_size_(static_cast<int64_t>(tokens.size())), tokens_(tokens) {
  std::vector<uint32_t> order;
  for (uint32_t id = 0; id < tokens.size(); ++id) {
    if (!tokens[id].empty()) order.push_back(id);
  }
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return tokens[a] < tokens[b] || (tokens[a] == tokens[b] && a < b);
  });
  // Each node covers the sorted ids sharing its prefix; its children are
  // made contiguous when it is visited.
  struct Pending {
    uint32_t node;
    size_t lo, hi, depth;
  };
  nodes_.emplace_back();
  std::vector<Pending> pending{{0, 0, order.size(), 0}};
  while (!pending.empty()) {
    const Pending p = pending.back();
    pending.pop_back();
    size_t i = p.lo;
    nodes_[p.node].first_token = static_cast<uint32_t>(token_ids_.size());
    for (; i < p.hi && tokens[order[i]].size() == p.depth; ++i) token_ids_.push_back(order[i]);
    nodes_[p.node].token_count =
        static_cast<uint32_t>(token_ids_.size()) - nodes_[p.node].first_token;
    nodes_[p.node].first_edge = static_cast<uint32_t>(edges_.size());
    while (i < p.hi) {
      const auto byte = static_cast<uint8_t>(tokens[order[i]][p.depth]);
      size_t j = i;
      while (j < p.hi && static_cast<uint8_t>(tokens[order[j]][p.depth]) == byte) ++j;
      const auto child = static_cast<uint32_t>(nodes_.size());
      nodes_.emplace_back();
      edges_.push_back({byte, child});
      pending.push_back({child, i, j, p.depth + 1});
      i = j;
    }
    nodes_[p.node].edge_count = static_cast<uint32_t>(edges_.size()) - nodes_[p.node].first_edge;
  }
  // Children come after their parent: a backward pass gathers each
  // subtree's tokens (contiguous in token_ids_, in sorted order) and bytes.
  std::vector<ByteSet> below(nodes_.size());
  for (size_t n = nodes_.size(); n-- > 0;) {
    Node& node = nodes_[n];
    node.subtree_end = node.first_token + node.token_count;
    node.utf8_valid = 0xFF;
    for (uint32_t e = node.first_edge; e < node.first_edge + node.edge_count; ++e) {
      const Edge edge = edges_[e];
      below[n].set(edge.byte);
      below[n] |= below[edge.child];
      node.subtree_end = std::max(node.subtree_end, nodes_[edge.child].subtree_end);
      for (int u = 0; u < 8; ++u) {
        const int next = Utf8Next(u, edge.byte);
        if (next < 0 || !((nodes_[edge.child].utf8_valid >> next) & 1)) {
          node.utf8_valid &= static_cast<uint8_t>(~(1u << u));
        }
      }
    }
  }
  std::unordered_map<std::string, uint32_t> index;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    auto [it, added] =
        index.emplace(below[n].to_string(), static_cast<uint32_t>(byte_sets_.size()));
    if (added) byte_sets_.push_back(below[n]);
    nodes_[n].bytes = it->second;
  }
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar,
                               std::shared_ptr<const TokenTrie> trie)
    : grammar_(std::move(grammar)), trie_(std::move(trie)) {
  std::vector<int32_t> stacks;
  bool accepting = false;
  seen_.clear();
  const auto [first, last] = grammar_->alternatives(grammar_->root());
  for (uint32_t a = first; a < last; ++a) {
    Expand(grammar_->alternative_start(a), -1, &stacks, &accepting);
  }
  current_ = InternState(std::move(stacks), accepting);
}

int32_t GrammarMatcher::Intern(uint32_t pos, int32_t parent) {
  auto [it, added] = node_ids_.emplace(NodeKey(pos, parent), static_cast<int32_t>(nodes_.size()));
  if (added) nodes_.push_back({pos, parent});
  return it->second;
}

int32_t GrammarMatcher::InternState(std::vector<int32_t> stacks, bool accepting) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  std::vector<int32_t> key = stacks;
  key.push_back(accepting ? 1 : 0);
  auto [it, added] = state_ids_.emplace(std::move(key), static_cast<int32_t>(states_.size()));
  if (added) states_.push_back({std::move(stacks), accepting, nullptr, nullptr, -1, {}});
  return it->second;
}

void GrammarMatcher::Expand(uint32_t pos, int32_t parent, std::vector<int32_t>* out,
                            bool* accepting) {
  work_.clear();
  work_.emplace_back(pos, parent);
  while (!work_.empty()) {
    auto [p, up] = work_.back();
    work_.pop_back();
    if (!seen_.insert(NodeKey(p, up)).second) continue;
    const Element& e = grammar_->element(p);
    switch (e.kind) {
      case Element::Kind::kAlt:
      case Element::Kind::kEnd:
        if (up < 0) {
          *accepting = true;
        } else {
          work_.emplace_back(nodes_[up].pos, nodes_[up].parent);
        }
        break;
      case Element::Kind::kBytes:
        out->push_back(Intern(p, up));
        break;
      case Element::Kind::kRef: {
        // A reference that ends its alternative returns straight to the
        // caller's caller: repetitions (right recursion) stay flat.
        const Element::Kind after = grammar_->element(p + 1).kind;
        const int32_t frame =
            after == Element::Kind::kAlt || after == Element::Kind::kEnd ? up : Intern(p + 1, up);
        const auto [first, last] = grammar_->alternatives(e.value);
        for (uint32_t a = first; a < last; ++a) {
          work_.emplace_back(grammar_->alternative_start(a), frame);
        }
        break;
      }
    }
  }
}

int32_t GrammarMatcher::Step(int32_t state, uint8_t byte) {
  if (states_[state].next.empty()) states_[state].next.assign(256, kUnknown);
  if (const int32_t known = states_[state].next[byte]; known != kUnknown) return known;
  next_.clear();
  seen_.clear();
  bool accepting = false;
  for (int32_t id : states_[state].stacks) {
    const Node node = nodes_[id];
    if (grammar_->byte_set(grammar_->element(node.pos).value).test(byte)) {
      Expand(node.pos + 1, node.parent, &next_, &accepting);
    }
  }
  const int32_t next = next_.empty() && !accepting ? -1 : InternState(next_, accepting);
  states_[state].next[byte] = next;
  return next;
}

std::shared_ptr<const TokenMask> GrammarMatcher::ComputeMask(int32_t state) {
  auto mask = std::make_shared<TokenMask>((trie_->vocab_size() + 63) / 64, 0);
  const TokenTrie& trie = *trie_;
  struct Pending {
    uint32_t node;
    int32_t state;
    int utf8;  // the UTF-8 decoder's state after the node's bytes
  };
  std::vector<Pending> pending{{0, state, 0}};
  while (!pending.empty()) {
    const auto [node_index, at, utf8_at] = pending.back();
    pending.pop_back();
    const TokenTrie::Node& node = trie.nodes_[node_index];
    for (uint32_t e = node.first_edge; e < node.first_edge + node.edge_count; ++e) {
      const TokenTrie::Edge edge = trie.edges_[e];
      const int32_t next = Step(at, edge.byte);
      if (next < 0) continue;
      const TokenTrie::Node& child = trie.nodes_[edge.child];
      // Whole subtrees that only loop on `next` are allowed without a walk.
      const int utf8 = Utf8Next(utf8_at, edge.byte);
      const bool whole = utf8 == 0 && child.edge_count > 0 && Whole(child, next);
      const uint32_t end = whole ? child.subtree_end : child.first_token + child.token_count;
      for (uint32_t t = child.first_token; t < end; ++t) {
        const uint32_t id = trie.token_ids_[t];
        (*mask)[id >> 6] |= uint64_t{1} << (id & 63);
      }
      if (!whole && child.edge_count > 0 && !states_[next].stacks.empty()) {
        pending.push_back({edge.child, next, utf8});
      }
    }
  }
  return mask;
}

const ByteSet& GrammarMatcher::Loops(int32_t state) {
  if (!states_[state].loops) {
    auto loops = std::make_shared<ByteSet>();
    if (!states_[state].stacks.empty()) {
      for (int b = 0; b < 256; ++b) {
        if (Step(state, static_cast<uint8_t>(b)) == state) loops->set(b);
      }
    }
    states_[state].loops = std::move(loops);
  }
  return *states_[state].loops;
}

bool GrammarMatcher::MultibyteLoops(int32_t state) {
  if (states_[state].multibyte_loops >= 0) return states_[state].multibyte_loops > 0;
  // Every multi-byte character from `state`: the decoder's state and the
  // matcher's, explored once per pair.
  bool loops = true;
  std::vector<std::pair<int, int32_t>> work;
  absl::flat_hash_set<uint64_t> visited;
  for (int b = 0xC2; b <= 0xF4 && loops; ++b) {
    const int32_t next = Step(state, static_cast<uint8_t>(b));
    loops = next >= 0;
    work.emplace_back(Utf8Next(0, static_cast<uint8_t>(b)), next);
  }
  while (loops && !work.empty()) {
    const auto [u, at] = work.back();
    work.pop_back();
    for (int b = 0x80; b <= 0xBF && loops; ++b) {
      const int next_u = Utf8Next(u, static_cast<uint8_t>(b));
      if (next_u < 0) continue;
      const int32_t next = Step(at, static_cast<uint8_t>(b));
      loops = next >= 0 && (next_u != 0 || next == state);
      if (loops && next_u != 0 &&
          visited.insert((static_cast<uint64_t>(next) << 3) | static_cast<uint64_t>(next_u))
              .second) {
        work.emplace_back(next_u, next);
      }
    }
  }
  states_[state].multibyte_loops = loops ? 1 : 0;
  return loops;
}

bool GrammarMatcher::Whole(const TokenTrie::Node& node, int32_t state) {
  static const ByteSet ascii = Ascii();
  const ByteSet& bytes = trie_->byte_sets_[node.bytes];
  if ((bytes & ascii & ~Loops(state)).any()) return false;
  if ((bytes & ~ascii).none()) return true;
  return (node.utf8_valid & 1) && MultibyteLoops(state);
}

const TokenMask& GrammarMatcher::Mask() {
  if (!states_[current_].mask) {
    auto mask = ComputeMask(current_);
    states_[current_].mask = std::move(mask);
  }
  return *states_[current_].mask;
}

bool GrammarMatcher::Accept(absl::string_view bytes) {
  int32_t at = current_;
  for (char c : bytes) {
    at = Step(at, static_cast<uint8_t>(c));
    if (at < 0) return false;
  }
  current_ = at;
  if (interned() > kMaxInterned) Compact();
  return true;
}

void GrammarMatcher::Compact() {
  // Each stack of the current state as its positions, bottom first.
  std::vector<std::vector<uint32_t>> stacks;
  for (int32_t id : states_[current_].stacks) {
    std::vector<uint32_t> positions;
    for (int32_t n = id; n >= 0; n = nodes_[n].parent) positions.push_back(nodes_[n].pos);
    std::reverse(positions.begin(), positions.end());
    stacks.push_back(std::move(positions));
  }
  const bool accepting = states_[current_].accepting;
  nodes_.clear();
  node_ids_.clear();
  states_.clear();
  state_ids_.clear();
  std::vector<int32_t> ids;
  for (const auto& positions : stacks) {
    int32_t parent = -1;
    for (uint32_t pos : positions) parent = Intern(pos, parent);
    ids.push_back(parent);
  }
  current_ = InternState(std::move(ids), accepting);
}

}  // namespace attn::grammar
