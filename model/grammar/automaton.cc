#include "model/grammar/automaton.h"

#include <algorithm>
#include <string>
#include <utility>

namespace attn::grammar::internal {
namespace {

// Tokens a trie subtree needs before a walk asks whether it is allowed
// whole.
constexpr uint32_t kJudgedSubtree = 16;

// Uniform bytes a state needs before its mask starts from a uniform walk
// (with fewer, walking the trie is cheap).
constexpr size_t kUniformBytes = 8;

ByteSet Ascii() {
  ByteSet ascii;
  for (int b = 0; b < 0x80; ++b) ascii.set(b);
  return ascii;
}

uint64_t NodeKey(uint32_t pos, int32_t parent) {
  return (uint64_t{pos} << 32) | static_cast<uint32_t>(parent + 1);
}

}  // namespace

GrammarAutomaton::GrammarAutomaton(std::shared_ptr<const Grammar> grammar,
                                   std::shared_ptr<const TokenTrie> trie)
    : grammar_(std::move(grammar)), trie_(std::move(trie)) {
  std::vector<int32_t> stacks;
  bool accepting = false;
  ClearVisits();
  const auto [first, last] = grammar_->alternatives(grammar_->root());
  for (uint32_t a = first; a < last; ++a) {
    Expand(grammar_->alternative_start(a), -1, &stacks, &accepting);
  }
  start_ = InternState(std::move(stacks), accepting);
}

int32_t GrammarAutomaton::Intern(uint32_t pos, int32_t parent) {
  auto [it, added] = node_ids_.emplace(NodeKey(pos, parent), static_cast<int32_t>(nodes_.size()));
  if (added) nodes_.push_back({pos, parent});
  return it->second;
}

int32_t GrammarAutomaton::InternState(std::vector<int32_t> stacks, bool accepting) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  std::vector<int32_t> key = stacks;
  key.push_back(accepting ? 1 : 0);
  auto [it, added] = state_ids_.emplace(std::move(key), static_cast<int32_t>(states_.size()));
  if (added) {
    states_.emplace_back();
    states_.back().stacks = std::move(stacks);
    states_.back().accepting = accepting;
  }
  return it->second;
}

bool GrammarAutomaton::FirstVisit(uint64_t key) {
  // Few keys per step: a list searched in order beats hashing.
  if (seen_.empty()) {
    if (std::find(seen_list_.begin(), seen_list_.end(), key) != seen_list_.end()) return false;
    if (seen_list_.size() < 32) {
      seen_list_.push_back(key);
      return true;
    }
    seen_.insert(seen_list_.begin(), seen_list_.end());
  }
  return seen_.insert(key).second;
}

void GrammarAutomaton::ClearVisits() {
  seen_list_.clear();
  if (!seen_.empty()) seen_.clear();
}

void GrammarAutomaton::Expand(uint32_t pos, int32_t parent, std::vector<int32_t>* out,
                              bool* accepting) {
  work_.clear();
  work_.emplace_back(pos, parent);
  while (!work_.empty()) {
    auto [p, up] = work_.back();
    work_.pop_back();
    if (!FirstVisit(NodeKey(p, up))) continue;
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

int32_t GrammarAutomaton::Step(int32_t state, uint8_t byte) {
  const uint8_t cls = grammar_->byte_class(byte);
  if (states_[state].next == kNoTable) {
    states_[state].next = static_cast<uint32_t>(transitions_.size());
    transitions_.resize(transitions_.size() + grammar_->class_count(), kUnknown);
  }
  if (const int32_t known = transitions_[states_[state].next + cls]; known != kUnknown) {
    return known;
  }
  next_.clear();
  ClearVisits();
  bool accepting = false;
  for (int32_t id : states_[state].stacks) {
    const Node node = nodes_[id];
    if (grammar_->byte_set(grammar_->element(node.pos).value).test(byte)) {
      Expand(node.pos + 1, node.parent, &next_, &accepting);
    }
  }
  const int32_t next = next_.empty() && !accepting ? -1 : InternState(next_, accepting);
  transitions_[states_[state].next + cls] = next;
  return next;
}

std::shared_ptr<const TokenMask> GrammarAutomaton::ComputeMask(int32_t state) {
  auto mask = std::make_shared<TokenMask>((trie_->vocab_size() + 63) / 64, 0);
  if (states_[state].uniform == kUnknown) ComputeUniform(state);
  std::vector<uint8_t> differing;
  std::vector<Pending> pending;
  if (const int32_t like = Reference(state, &differing); like >= 0) {
    // Tokens whose first byte leads both states to one state are judged
    // alike: the reference's mask, and the other first bytes walked here.
    *mask = *MaskOf(like);
    const TokenTrie::Node& root = trie_->nodes_[0];
    for (uint32_t e = root.first_edge; e < root.first_edge + root.edge_count; ++e) {
      const TokenTrie::Edge edge = trie_->edges_[e];
      if (!std::binary_search(differing.begin(), differing.end(), edge.byte)) continue;
      const TokenTrie::Node& child = trie_->nodes_[edge.child];
      for (uint32_t t = child.first_token; t < child.subtree_end; ++t) {
        const uint32_t id = trie_->token_ids_[t];
        (*mask)[id >> 6] &= ~(uint64_t{1} << (id & 63));
      }
    }
    pending.push_back({0, state, 0});
    Walk(mask.get(), std::move(pending), &differing);
    return mask;
  }
  const int run = states_[state].uniform >= 0 ? Run(state) : 0;
  if (run > 0 && states_[state].uniform_ascii.count() >= kUniformBytes) {
    FromUniformWalk(state, run, mask.get(), &pending);
  } else {
    pending.push_back({0, state, 0});
  }
  Walk(mask.get(), std::move(pending), nullptr);
  return mask;
}

void GrammarAutomaton::FromUniformWalk(int32_t state, int run, TokenMask* mask,
                                       std::vector<Pending>* pending) {
  // The uniform part from the vocabulary's cache; the grammar steps only
  // at the frontier, from the state that many uniform steps reach.
  const TokenTrie& trie = *trie_;
  auto walk = trie.Uniform(states_[state].uniform_ascii, states_[state].uniform_multibyte, run);
  *mask = walk->allowed;
  std::vector<int32_t> chain{state};
  for (const auto& f : walk->frontier) {
    while (chain.size() <= f.chars) chain.push_back(states_[chain.back()].uniform);
    int32_t at = chain[f.chars];
    for (int i = 0; i < f.length && at >= 0; ++i) at = Step(at, f.bytes[i]);
    if (at < 0) continue;
    const TokenTrie::Node& child = trie.nodes_[f.child];
    for (uint32_t t = child.first_token; t < child.first_token + child.token_count; ++t) {
      const uint32_t id = trie.token_ids_[t];
      (*mask)[id >> 6] |= uint64_t{1} << (id & 63);
    }
    if (child.edge_count > 0 && !states_[at].stacks.empty()) {
      pending->push_back({f.child, at, f.utf8});
    }
  }
}

void GrammarAutomaton::Walk(TokenMask* mask, std::vector<Pending> pending,
                            const std::vector<uint8_t>* root_bytes) {
  const TokenTrie& trie = *trie_;
  while (!pending.empty()) {
    const auto [node_index, at, utf8_at] = pending.back();
    pending.pop_back();
    const TokenTrie::Node& node = trie.nodes_[node_index];
    for (uint32_t e = node.first_edge; e < node.first_edge + node.edge_count; ++e) {
      const TokenTrie::Edge edge = trie.edges_[e];
      if (node_index == 0 && root_bytes != nullptr &&
          !std::binary_search(root_bytes->begin(), root_bytes->end(), edge.byte)) {
        continue;
      }
      const int32_t next = Step(at, edge.byte);
      if (next < 0) continue;
      const TokenTrie::Node& child = trie.nodes_[edge.child];
      // Whole subtrees are allowed without a walk; a small one is walked
      // rather than judged, unless judging is cheap (judging makes states
      // a step ahead of it).
      const int utf8 = Utf8Next(utf8_at, edge.byte);
      const bool judged = child.subtree_end - child.first_token >= kJudgedSubtree ||
                          (child.edge_count > 0 && states_[next].run >= 0);
      const bool whole = utf8 == 0 && judged && Whole(child, next);
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
}

int32_t GrammarAutomaton::Reference(int32_t state, std::vector<uint8_t>* differing) {
  // The uniform successor, where it loops (its mask is cheap) or is known.
  const int32_t like = states_[state].uniform;
  if (like < 0 || like == state) return -1;
  if (states_[like].uniform == kUnknown) ComputeUniform(like);
  if (!states_[like].mask && states_[like].uniform != like) return -1;
  // Every multi-byte character leads both to `like` (whatever states they
  // pass through): tokens starting with one are judged alike.
  const bool multibyte_alike = states_[state].uniform_multibyte &&
                               states_[like].uniform_multibyte && states_[like].uniform == like;
  uint32_t walked = 0;  // tokens under the first bytes that differ
  const TokenTrie::Node& root = trie_->nodes_[0];
  for (uint32_t e = root.first_edge; e < root.first_edge + root.edge_count; ++e) {
    const uint8_t byte = trie_->edges_[e].byte;
    if (multibyte_alike && byte >= 0xC2 && byte <= 0xF4) continue;
    if (Step(state, byte) == Step(like, byte)) continue;
    differing->push_back(byte);
    const TokenTrie::Node& child = trie_->nodes_[trie_->edges_[e].child];
    walked += child.subtree_end - child.first_token;
  }
  std::sort(differing->begin(), differing->end());
  return walked <= trie_->vocab_size() / 4 ? like : -1;
}

std::shared_ptr<const TokenMask> GrammarAutomaton::MaskOf(int32_t state) {
  if (!states_[state].mask) {
    auto mask = ComputeMask(state);
    mask_words_ += mask->size();
    states_[state].mask = std::move(mask);
  }
  return states_[state].mask;
}

void GrammarAutomaton::ComputeUniform(int32_t state) {
  // The next state most ASCII bytes reach (this one where it loops).
  absl::flat_hash_map<int32_t, int> reached;
  for (int b = 0; b < 0x80; ++b) {
    const int32_t next = Step(state, static_cast<uint8_t>(b));
    if (next >= 0) ++reached[next];
  }
  int32_t best = -1;
  int most = 0;
  for (const auto& [next, count] : reached) {
    if (count > most || (count == most && next == state)) best = next, most = count;
  }
  ByteSet ascii;
  for (int b = 0; b < 0x80 && best >= 0; ++b) {
    if (Step(state, static_cast<uint8_t>(b)) == best) ascii.set(b);
  }
  const bool multibyte = best >= 0 && MultibyteTo(state, best);
  State& s = states_[state];  // Step may have grown states_
  s.uniform = best;
  s.uniform_ascii = ascii;
  s.uniform_multibyte = multibyte;
}

bool GrammarAutomaton::MultibyteTo(int32_t from, int32_t to) {
  // Every multi-byte character from `from`: the decoder's state and the
  // matcher's, explored once per pair.
  std::vector<std::pair<int, int32_t>> work;
  absl::flat_hash_set<uint64_t> visited;
  for (int b = 0xC2; b <= 0xF4; ++b) {
    const int32_t next = Step(from, static_cast<uint8_t>(b));
    if (next < 0) return false;
    if (visited
            .insert((static_cast<uint64_t>(next) << 3) |
                    static_cast<uint64_t>(Utf8Next(0, static_cast<uint8_t>(b))))
            .second) {
      work.emplace_back(Utf8Next(0, static_cast<uint8_t>(b)), next);
    }
  }
  while (!work.empty()) {
    const auto [u, at] = work.back();
    work.pop_back();
    std::vector<bool> tried(2 * 256);  // (byte class, decoder state) pairs, by class
    for (int b = 0x80; b <= 0xBF; ++b) {
      const int next_u = Utf8Next(u, static_cast<uint8_t>(b));
      if (next_u < 0) continue;
      const size_t pair = size_t{grammar_->byte_class(static_cast<uint8_t>(b))} * 2 + (next_u == 0);
      if (tried[pair]) continue;  // the same class and outcome: the same step
      tried[pair] = true;
      const int32_t next = Step(at, static_cast<uint8_t>(b));
      if (next < 0 || (next_u == 0 && next != to)) return false;
      if (next_u != 0 &&
          visited.insert((static_cast<uint64_t>(next) << 3) | static_cast<uint64_t>(next_u))
              .second) {
        work.emplace_back(next_u, next);
      }
    }
  }
  return true;
}

int GrammarAutomaton::Run(int32_t state) {
  if (states_[state].run >= 0) return states_[state].run;
  if (states_[state].uniform == kUnknown) ComputeUniform(state);
  // Past kMaxRun steps a subtree is walked instead: fewer states to make
  // ahead of a bounded repetition (a string's maxLength).
  constexpr int kMaxRun = 16;
  int run = 0;
  for (int32_t at = state; run < kMaxRun;) {
    if (states_[at].uniform == kUnknown) ComputeUniform(at);
    const State& s = states_[at];
    const State& first = states_[state];
    if (s.uniform < 0 || s.uniform_ascii != first.uniform_ascii ||
        s.uniform_multibyte != first.uniform_multibyte) {
      break;
    }
    ++run;
    if (s.uniform == at) {  // a loop: the same from here on
      run = 255;
      break;
    }
    at = s.uniform;
  }
  states_[state].run = static_cast<int16_t>(run);
  return run;
}

bool GrammarAutomaton::Whole(const TokenTrie::Node& node, int32_t state) {
  static const ByteSet ascii = Ascii();
  const ByteSet& bytes = trie_->byte_sets_[node.bytes];
  const bool multibyte = (bytes & ~ascii).any();
  if (multibyte && !(node.utf8_valid & 1)) return false;
  if (states_[state].uniform == kUnknown) ComputeUniform(state);
  const State& s = states_[state];
  if ((bytes & ascii & ~s.uniform_ascii).any() || (multibyte && !s.uniform_multibyte)) {
    return false;
  }
  // A path below spells at most `height` characters, each taking the same
  // uniform step.
  return node.height <= Run(state);
}

GrammarAutomaton::GrammarAutomaton(const GrammarAutomaton& old, int32_t state)
    : grammar_(old.grammar_), trie_(old.trie_) {
  // Each stack of the state as its positions, bottom first.
  std::vector<int32_t> ids;
  for (int32_t id : old.states_[state].stacks) {
    std::vector<uint32_t> positions;
    for (int32_t n = id; n >= 0; n = old.nodes_[n].parent) positions.push_back(old.nodes_[n].pos);
    int32_t parent = -1;
    for (auto it = positions.rbegin(); it != positions.rend(); ++it) parent = Intern(*it, parent);
    ids.push_back(parent);
  }
  start_ = InternState(std::move(ids), old.states_[state].accepting);
}

}  // namespace attn::grammar::internal
