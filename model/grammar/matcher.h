// Which tokens may come next under a grammar: the matcher behind every
// constrained sequence.
//
// A matcher's state is a set of stacks of grammar positions (a pushdown
// automaton run on all alternatives at once). A token is allowed iff its
// bytes, fed one by one, leave at least one stack alive or the sentence
// complete: so tokens that cross rule boundaries, or end inside a UTF-8
// character, are judged exactly.
//
// Speed: stacks are interned (equal stacks share one id, a tail call reuses
// its caller's frame, so repetitions never deepen a stack), stack sets are
// interned as states, a state's step on a byte is computed once (a table of
// 256 per state), and a
// mask is computed once per state by walking the vocabulary's byte trie
// (TokenTrie) from that state, pruning every subtree no stack survives. A
// stream whose grammar returns to a state (inside a string, between array
// items) reuses that state's mask.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "model/grammar/grammar.h"

namespace attn::grammar {

// The vocabulary's token byte strings as a trie.
class TokenTrie {
 public:
  // tokens[id]: the bytes token `id` adds to the text; an empty one is
  // never allowed by a grammar (control and special tokens).
  explicit TokenTrie(const std::vector<std::string>& tokens);

  int64_t vocab_size() const { return vocab_size_; }
  const std::string& token(int64_t id) const { return tokens_[id]; }

 private:
  friend class GrammarMatcher;
  struct Node {
    uint32_t first_edge = 0, edge_count = 0;    // into edges_
    uint32_t first_token = 0, token_count = 0;  // into token_ids_: tokens ending here
    uint32_t subtree_end = 0;  // token_ids_[first_token, subtree_end): the node's and below
    uint32_t bytes = 0;        // into byte_sets_: every byte on the edges below it
    // Bit u: every path below, read from UTF-8 decoder state u
    // (Utf8Next), is valid UTF-8 or a valid start of it.
    uint8_t utf8_valid = 0;
  };
  struct Edge {
    uint8_t byte;
    uint32_t child;
  };
  int64_t vocab_size_ = 0;
  std::vector<std::string> tokens_;
  std::vector<Node> nodes_;  // nodes_[0]: the root (the empty prefix)
  std::vector<Edge> edges_;
  std::vector<uint32_t> token_ids_;
  std::vector<ByteSet> byte_sets_;  // distinct subtree byte sets
};

// Bit i of word i / 64: token i is allowed.
using TokenMask = std::vector<uint64_t>;
inline bool MaskAllows(const TokenMask& mask, int64_t id) {
  return (mask[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1;
}

class GrammarMatcher {
 public:
  GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie);

  // The tokens whose bytes may come next (end-of-sequence tokens are the
  // caller's: they are allowed where CanEnd()). The mask is valid until
  // the next call that changes the matcher.
  const TokenMask& Mask();
  // Feeds bytes; false (and nothing changes) when the grammar refuses them.
  bool Accept(absl::string_view bytes);
  // The bytes so far are a whole sentence of the grammar.
  bool CanEnd() const { return states_[current_].accepting; }
  // Some byte may still follow.
  bool CanContinue() const { return !states_[current_].stacks.empty(); }

  // Interned stacks and states (a measure of the memory it holds).
  size_t interned() const { return nodes_.size() + states_.size() * 64; }

 private:
  struct Node {
    uint32_t pos;    // the element to match next
    int32_t parent;  // the stack below: where to go on at the alternative's end (-1: done)
  };
  struct State {
    std::vector<int32_t> stacks;  // node ids whose pos is a kBytes element, sorted
    bool accepting = false;
    std::shared_ptr<const TokenMask> mask;
    // The bytes that lead back to this state (inside a string, most of
    // them), and whether every multi-byte character does too: a trie
    // subtree spelled with these alone is allowed whole.
    std::shared_ptr<const ByteSet> loops;
    int8_t multibyte_loops = -1;  // -1: not known yet
    // The state after each byte (kUnknown until first asked; -1: none).
    std::vector<int32_t> next;
  };
  static constexpr int32_t kUnknown = -2;

  int32_t Intern(uint32_t pos, int32_t parent);
  int32_t InternState(std::vector<int32_t> stacks, bool accepting);
  // The state after `byte`, -1 when no stack survives and the sentence is
  // not complete.
  int32_t Step(int32_t state, uint8_t byte);
  // Follows (pos, parent) to the byte elements it can match next.
  void Expand(uint32_t pos, int32_t parent, std::vector<int32_t>* out, bool* accepting);
  std::shared_ptr<const TokenMask> ComputeMask(int32_t state);
  const ByteSet& Loops(int32_t state);
  bool MultibyteLoops(int32_t state);
  // Whether every token below trie node `node` (reached at a character
  // boundary in `state`) is allowed without walking it.
  bool Whole(const TokenTrie::Node& node, int32_t state);
  // Past a size, forgets everything but the current state's stacks.
  void Compact();

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<Node> nodes_;
  absl::flat_hash_map<uint64_t, int32_t> node_ids_;
  std::vector<State> states_;
  absl::flat_hash_map<std::vector<int32_t>, int32_t> state_ids_;  // stacks + accepting bit
  int32_t current_ = 0;
  // Scratch of Expand and Step.
  std::vector<std::pair<uint32_t, int32_t>> work_;
  absl::flat_hash_set<uint64_t> seen_;
  std::vector<int32_t> next_;
};

}  // namespace attn::grammar
