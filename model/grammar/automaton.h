// The pushdown automaton behind GrammarMatcher (internal to model/grammar):
// interned stacks and states, transitions per byte class, and each state's
// mask, computed once and shared by every matcher of one grammar on one
// vocabulary (GrammarMatcher takes `mu()` around each use).
//
// A state is a set of stacks of grammar positions (a pushdown automaton
// run on all alternatives at once). A token is allowed iff its bytes, fed
// one by one, leave at least one stack alive or the sentence complete.
// Speed: stacks are interned (equal stacks share one id, a tail call reuses
// its caller's frame, so repetitions never deepen a stack), stack sets are
// interned as states, a state's step on a byte is computed once per byte
// class (bytes no set of the grammar tells apart), and a mask is computed
// once per state:
//   - from the vocabulary's uniform walk (TokenTrie::Uniform) where every
//     character leads the same way from the state and the next ones
//     (inside a string; under maxLength, to the next count), stepping the
//     grammar only at the walk's frontier (quotes, escapes, long tokens);
//   - from a reference state's mask where most first bytes lead both to
//     one state (a key that may still become a declared name), walking
//     the other first bytes;
//   - otherwise by walking the trie, pruning every subtree no stack
//     survives, and allowing whole subtrees whose characters all step
//     uniformly.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "model/grammar/grammar.h"
#include "model/grammar/matcher.h"

namespace attn::grammar::internal {

// RFC 3629's UTF-8 as a decoder: state 0 at a character boundary, 1 to 7
// inside one (which continuation bytes may follow); -1 for bytes that can
// never be UTF-8.
int Utf8Next(int state, uint8_t b);

class GrammarAutomaton {
 public:
  GrammarAutomaton(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie);
  // A new automaton whose start is `state` of `old` (the stacks alone).
  GrammarAutomaton(const GrammarAutomaton& old, int32_t state);

  absl::Mutex& mu() { return mu_; }
  int32_t start() const { return start_; }
  // The state after `byte`, -1 when no stack survives and the sentence is
  // not complete.
  int32_t Step(int32_t state, uint8_t byte);
  std::shared_ptr<const TokenMask> MaskOf(int32_t state);
  bool accepting(int32_t state) const { return states_[state].accepting; }
  bool alive(int32_t state) const { return !states_[state].stacks.empty(); }
  // Interned stacks, states and masks, in 8-byte words (a measure of the
  // memory it holds).
  size_t interned() const {
    return nodes_.size() + states_.size() * 16 + transitions_.size() / 2 + mask_words_;
  }
  const Grammar* grammar() const { return grammar_.get(); }
  const TokenTrie* trie() const { return trie_.get(); }

 private:
  struct Node {
    uint32_t pos;    // the element to match next
    int32_t parent;  // the stack below: where to go on at the alternative's end (-1: done)
  };
  static constexpr int32_t kUnknown = -2;
  static constexpr uint32_t kNoTable = ~uint32_t{0};
  struct State {
    std::vector<int32_t> stacks;  // node ids whose pos is a kBytes element, sorted
    bool accepting = false;
    std::shared_ptr<const TokenMask> mask;
    // Where most ASCII bytes lead (kUnknown until asked; -1: nowhere),
    // which ASCII bytes do, and whether every multi-byte character does.
    int32_t uniform = -2;
    bool uniform_multibyte = false;
    // How many steps from here keep the same uniform bytes (-1: not known
    // yet; 255 where the state loops).
    int16_t run = -1;
    ByteSet uniform_ascii;
    // Where the state's row of transitions_ starts (kNoTable: not yet).
    uint32_t next = kNoTable;
  };

  int32_t Intern(uint32_t pos, int32_t parent);
  int32_t InternState(std::vector<int32_t> stacks, bool accepting);
  // Follows (pos, parent) to the byte elements it can match next.
  void Expand(uint32_t pos, int32_t parent, std::vector<int32_t>* out, bool* accepting);
  // A walk's step: a trie node reached in a state.
  struct Pending {
    uint32_t node;
    int32_t state;
    int utf8;  // the UTF-8 decoder's state after the node's bytes
  };
  std::shared_ptr<const TokenMask> ComputeMask(int32_t state);
  // Marks the tokens below `pending`'s nodes that the grammar allows (at
  // the root, only edges with `root_bytes` where given).
  void Walk(TokenMask* mask, std::vector<Pending> pending, const std::vector<uint8_t>* root_bytes);
  // Starts a mask from the vocabulary's uniform walk for `state`.
  void FromUniformWalk(int32_t state, int run, TokenMask* mask, std::vector<Pending>* pending);
  // A state whose mask `state` may start from (-1: none): the first bytes
  // on which their steps differ go to `differing`, sorted.
  int32_t Reference(int32_t state, std::vector<uint8_t>* differing);
  // Fills the state's uniform* fields.
  void ComputeUniform(int32_t state);
  int Run(int32_t state);
  // Whether every multi-byte character read from `from` ends in `to`.
  bool MultibyteTo(int32_t from, int32_t to);
  // Whether every token below trie node `node` (reached at a character
  // boundary in `state`) is allowed without walking it.
  bool Whole(const TokenTrie::Node& node, int32_t state);

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<Node> nodes_;
  absl::flat_hash_map<uint64_t, int32_t> node_ids_;
  std::vector<State> states_;
  absl::flat_hash_map<std::vector<int32_t>, int32_t> state_ids_;  // stacks + accepting bit
  // Scratch of Expand and Step.
  std::vector<std::pair<uint32_t, int32_t>> work_;
  // Expand's visited (pos, parent) pairs: a short list, a set past it.
  bool FirstVisit(uint64_t key);
  void ClearVisits();
  std::vector<uint64_t> seen_list_;
  absl::flat_hash_set<uint64_t> seen_;
  // Per state and byte class, the state after it (kUnknown until first
  // asked; -1: none): rows of grammar.class_count() entries.
  std::vector<int32_t> transitions_;
  std::vector<int32_t> next_;
  absl::Mutex mu_;
  int32_t start_ = 0;
  size_t mask_words_ = 0;
};

}  // namespace attn::grammar::internal
