// Which tokens may come next under a grammar: the matcher behind every
// constrained sequence, and the vocabulary's byte trie it walks. How masks
// are found: automaton.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "model/grammar/grammar.h"

namespace attn::grammar {
namespace internal {
class GrammarAutomaton;
}  // namespace internal

// Bit i of word i / 64: token i is allowed.
using TokenMask = std::vector<uint64_t>;
inline bool MaskAllows(const TokenMask& mask, int64_t id) {
  return (mask[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1;
}

// The vocabulary's token byte strings as a trie.
class TokenTrie {
 public:
  // tokens[id]: the bytes token `id` adds to the text; an empty one is
  // never allowed by a grammar (control and special tokens).
  explicit TokenTrie(const std::vector<std::string>& tokens);

  int64_t vocab_size() const { return vocab_size_; }
  const std::string& token(int64_t id) const { return tokens_[id]; }

 private:
  friend class internal::GrammarAutomaton;
  // What a state whose characters all step uniformly allows, found once
  // per kind of state for every matcher on this vocabulary: the tokens
  // spelled with `ascii` bytes (and multi-byte characters where
  // `multibyte`) in at most `run` characters, and the frontier: each trie
  // edge that leaves those, with what the grammar must judge there.
  struct UniformWalk {
    struct Frontier {
      uint32_t child;  // the node the edge reaches
      uint8_t chars;   // uniform characters before the edge's character
      int8_t utf8;     // the UTF-8 decoder's state after the edge
      uint8_t length;  // the edge's character so far, the edge's byte last
      uint8_t bytes[4];
    };
    TokenMask allowed;
    std::vector<Frontier> frontier;
  };
  std::shared_ptr<const UniformWalk> Uniform(const ByteSet& ascii, bool multibyte, int run) const;
  std::shared_ptr<const UniformWalk> WalkUniform(const ByteSet& ascii, bool multibyte,
                                                 int run) const;
  struct Node {
    uint32_t first_edge = 0, edge_count = 0;    // into edges_
    uint32_t first_token = 0, token_count = 0;  // into token_ids_: tokens ending here
    uint32_t subtree_end = 0;  // token_ids_[first_token, subtree_end): the node's and below
    uint32_t bytes = 0;        // into byte_sets_: every byte on the edges below it
    // Bit u: every path below, read from UTF-8 decoder state u
    // (Utf8Next), is valid UTF-8 or a valid start of it.
    uint8_t utf8_valid = 0;
    uint8_t height = 0;  // the longest path below, in bytes (at most 255)
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
  mutable absl::Mutex mu_;
  mutable absl::flat_hash_map<std::string, std::shared_ptr<const UniformWalk>> walks_
      ABSL_GUARDED_BY(mu_);
};

class GrammarMatcher {
 public:
  // Shares the automaton of every live matcher of `grammar` on `trie`:
  // states and masks one stream computed, the next reuses.
  GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie);

  // The tokens whose bytes may come next (end-of-sequence tokens are the
  // caller's: they are allowed where CanEnd()). The mask is valid until
  // the next call that changes the matcher.
  const TokenMask& Mask();
  // Feeds bytes; false (and nothing changes) when the grammar refuses them.
  bool Accept(absl::string_view bytes);
  // Starts computing the current state's mask on a background thread (a
  // decoder calls it before the model's forward pass, so that Mask() after
  // it finds the work done or under way). Never blocks.
  void Prefetch() const;
  // The bytes so far are a whole sentence of the grammar.
  bool CanEnd() const { return accepting_; }
  // Some byte may still follow.
  bool CanContinue() const { return alive_; }

  // The automaton's interned stacks and states (a measure of its memory).
  size_t interned() const;

 private:
  // Past a size, moves to an automaton of its own that holds only the
  // current state's stacks (the others keep theirs).
  void Detach();

  std::shared_ptr<internal::GrammarAutomaton> automaton_;
  int32_t current_ = 0;
  bool accepting_ = false, alive_ = false;
  std::shared_ptr<const TokenMask> mask_;
};

}  // namespace attn::grammar
