#include "model/grammar/matcher.h"

#include <algorithm>
#include <deque>
#include <list>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>

#include "model/grammar/automaton.h"

namespace attn::grammar {
namespace internal {

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

}  // namespace internal
namespace {

using internal::GrammarAutomaton;
using internal::Utf8Next;

// Words an automaton may hold (16 MiB) before a matcher moves on with its
// current state alone (a long generation through many distinct states).
constexpr size_t kMaxInterned = size_t{2} << 20;

// Automata kept for grammars no matcher uses now (each at most 16 MiB).
constexpr size_t kKeptAutomata = 16;

// Uniform walks a vocabulary keeps (one per kind of state: inside a string,
// its last steps before a maxLength, digits, ...).
constexpr size_t kMaxUniformWalks = 64;

// The automata of the grammars matchers used last, so that the next
// request with the same schema starts where the last one left off. An
// automaton holds its grammar, so a key's address is not reused while its
// entry lives.
class Automata {
 public:
  static Automata& Shared() {
    static auto* automata = new Automata;
    return *automata;
  }

  std::shared_ptr<GrammarAutomaton> Get(std::shared_ptr<const Grammar> grammar,
                                        std::shared_ptr<const TokenTrie> trie) {
    absl::MutexLock lock(&mu_);
    const Key key{grammar.get(), trie.get()};
    for (auto it = recent_.begin(); it != recent_.end(); ++it) {
      if (it->first != key) continue;
      recent_.splice(recent_.begin(), recent_, it);  // most recent first
      return recent_.front().second;
    }
    auto automaton = std::make_shared<GrammarAutomaton>(std::move(grammar), std::move(trie));
    recent_.emplace_front(key, automaton);
    if (recent_.size() > kKeptAutomata) recent_.pop_back();
    return automaton;
  }

  // New matchers start afresh rather than join `automaton`.
  void Forget(const GrammarAutomaton* automaton) {
    absl::MutexLock lock(&mu_);
    recent_.remove_if([&](const auto& entry) { return entry.second.get() == automaton; });
  }

 private:
  using Key = std::pair<const Grammar*, const TokenTrie*>;
  absl::Mutex mu_;
  std::list<std::pair<Key, std::shared_ptr<GrammarAutomaton>>> recent_ ABSL_GUARDED_BY(mu_);
};

// One background thread that computes masks ahead of their use.
class Prefetcher {
 public:
  static Prefetcher& Shared() {
    static auto* prefetcher = new Prefetcher;  // its thread runs for the process
    return *prefetcher;
  }

  void Post(std::shared_ptr<GrammarAutomaton> automaton, int32_t state) {
    absl::MutexLock lock(&mu_);
    if (queue_.size() >= kMaxQueued) return;  // Mask() computes it when asked
    queue_.emplace_back(std::move(automaton), state);
  }

 private:
  static constexpr size_t kMaxQueued = 4096;

  Prefetcher() : thread_([this] { Run(); }) {}

  void Run() {
    for (;;) {
      std::pair<std::shared_ptr<GrammarAutomaton>, int32_t> job;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](std::deque<std::pair<std::shared_ptr<GrammarAutomaton>, int32_t>>* q) {
              return !q->empty();
            },
            &queue_));
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      absl::MutexLock lock(&job.first->mu());
      job.first->MaskOf(job.second);
    }
  }

  absl::Mutex mu_;
  std::deque<std::pair<std::shared_ptr<GrammarAutomaton>, int32_t>> queue_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

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
    node.height = 0;
    for (uint32_t e = node.first_edge; e < node.first_edge + node.edge_count; ++e) {
      const Edge edge = edges_[e];
      below[n].set(edge.byte);
      below[n] |= below[edge.child];
      node.subtree_end = std::max(node.subtree_end, nodes_[edge.child].subtree_end);
      node.height = static_cast<uint8_t>(
          std::max<int>(node.height, std::min(255, nodes_[edge.child].height + 1)));
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

std::shared_ptr<const TokenTrie::UniformWalk> TokenTrie::Uniform(const ByteSet& ascii,
                                                                 bool multibyte, int run) const {
  const std::string key = absl::StrCat(ascii.to_string(), multibyte ? "m" : "-", run);
  {
    absl::MutexLock lock(&mu_);
    if (auto it = walks_.find(key); it != walks_.end()) return it->second;
  }
  auto walk = WalkUniform(ascii, multibyte, run);
  absl::MutexLock lock(&mu_);
  if (walks_.size() >= kMaxUniformWalks) walks_.clear();
  walks_.emplace(key, walk);
  return walk;
}

std::shared_ptr<const TokenTrie::UniformWalk> TokenTrie::WalkUniform(const ByteSet& ascii,
                                                                     bool multibyte,
                                                                     int run) const {
  auto walk = std::make_shared<UniformWalk>();
  walk->allowed.assign((vocab_size_ + 63) / 64, 0);
  struct Pending {
    uint32_t node;
    int chars;
    int utf8;
    uint8_t length;
    uint8_t bytes[4];
  };
  std::vector<Pending> pending{{0, 0, 0, 0, {}}};
  while (!pending.empty()) {
    const Pending p = pending.back();
    pending.pop_back();
    const Node& node = nodes_[p.node];
    for (uint32_t e = node.first_edge; e < node.first_edge + node.edge_count; ++e) {
      const Edge edge = edges_[e];
      const int next_utf8 = Utf8Next(p.utf8, edge.byte);
      Pending next{edge.child, p.chars, next_utf8, static_cast<uint8_t>(p.length + 1), {}};
      std::copy(p.bytes, p.bytes + p.length, next.bytes);
      next.bytes[p.length] = edge.byte;
      // Uniform: an ASCII byte of the set, or a valid byte of a multi-byte
      // character, within the run (a character counts where it starts).
      const bool starts = p.utf8 == 0;
      const bool uniform = next_utf8 >= 0 && (!starts || p.chars < run) &&
                           (edge.byte < 0x80 ? ascii.test(edge.byte) : multibyte);
      if (!uniform) {
        walk->frontier.push_back({edge.child,
                                  static_cast<uint8_t>(p.chars),
                                  static_cast<int8_t>(next_utf8),
                                  next.length,
                                  {next.bytes[0], next.bytes[1], next.bytes[2], next.bytes[3]}});
        continue;
      }
      const Node& child = nodes_[edge.child];
      for (uint32_t t = child.first_token; t < child.first_token + child.token_count; ++t) {
        walk->allowed[token_ids_[t] >> 6] |= uint64_t{1} << (token_ids_[t] & 63);
      }
      if (next_utf8 == 0) {  // a whole character: the next starts afresh
        next.chars = p.chars + 1;
        next.length = 0;
      }
      if (child.edge_count > 0) pending.push_back(next);
    }
  }
  return walk;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar,
                               std::shared_ptr<const TokenTrie> trie)
    : automaton_(Automata::Shared().Get(std::move(grammar), std::move(trie))) {
  absl::MutexLock lock(&automaton_->mu());
  current_ = automaton_->start();
  accepting_ = automaton_->accepting(current_);
  alive_ = automaton_->alive(current_);
}

const TokenMask& GrammarMatcher::Mask() {
  if (!mask_) {
    absl::MutexLock lock(&automaton_->mu());
    mask_ = automaton_->MaskOf(current_);
  }
  return *mask_;
}

bool GrammarMatcher::Accept(absl::string_view bytes) {
  bool detach = false;
  {
    absl::MutexLock lock(&automaton_->mu());
    int32_t at = current_;
    for (char c : bytes) {
      at = automaton_->Step(at, static_cast<uint8_t>(c));
      if (at < 0) return false;
    }
    if (at != current_) mask_.reset();
    current_ = at;
    accepting_ = automaton_->accepting(at);
    alive_ = automaton_->alive(at);
    detach = automaton_->interned() > kMaxInterned;
  }
  if (detach) Detach();
  return true;
}

void GrammarMatcher::Prefetch() const {
  if (!mask_ && alive_) Prefetcher::Shared().Post(automaton_, current_);
}

size_t GrammarMatcher::interned() const {
  absl::MutexLock lock(&automaton_->mu());
  return automaton_->interned();
}

void GrammarMatcher::Detach() {
  Automata::Shared().Forget(automaton_.get());
  std::shared_ptr<GrammarAutomaton> own;
  {
    absl::MutexLock lock(&automaton_->mu());
    own = std::make_shared<GrammarAutomaton>(*automaton_, current_);
  }
  automaton_ = std::move(own);
  absl::MutexLock lock(&automaton_->mu());
  current_ = automaton_->start();
}

}  // namespace attn::grammar
