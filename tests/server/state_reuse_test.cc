// State reuse in the engine: the state cache (server/state/state_cache.h) and the
// states requests bring and take. For every mixer kind, a request's greedy
// tokens do not depend on where its state came from, and its logprobs
// equal those of the same tokens read from zero within 1e-4.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "server/engine/engine.h"
#include "server/state/memory_state_store.h"
#include "server/state/state_cache.h"
#include "tests/server/fake_clock.h"
#include "tests/server/requests.h"
#include "tests/test_util.h"
#include "tests/tiny_model.h"

namespace attn::serving {
namespace state_reuse_test {

using attn::testing::FakeClock;
using attn::testing::TinyModel;
using attn::testing::TinyTokenizer;

struct Result {
  std::vector<int64_t> ids;
  std::vector<float> logprobs;
  StreamEvent last;
  bool done = false;
};

class LookupLog : public EngineObserver {
 public:
  void OnCacheLookup(int64_t reused, int64_t) override { reused_.push_back(reused); }
  std::vector<int64_t> reused_;
};

EngineRequest GreedyRun(std::vector<int64_t> prompt, int64_t max_tokens) {
  return testing::GreedyEngineRequest(std::move(prompt), max_tokens);
}

std::vector<int64_t> Tokens(int64_t length, int64_t offset) {
  return testing::SyntheticIds(length, offset);
}

std::vector<int64_t> Concat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

void ExpectSame(const Result& got, const Result& want, const std::string& what) {
  ASSERT_TRUE(got.last.status.ok()) << what << ": " << got.last.status;
  EXPECT_EQ(got.ids, want.ids) << what;
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << what;
  for (size_t i = 0; i < got.logprobs.size(); ++i) {
    EXPECT_NEAR(got.logprobs[i], want.logprobs[i], 1e-4) << what << " token " << i;
  }
}

// Whether TinyModel(kind)'s state grows with its context: a key/value
// cache, or the attention layers of the short convolution's hybrid.
bool KeepsKeysAndValues(MixerKind kind) {
  return kind == MixerKind::kMha || kind == MixerKind::kMhaAlibi || kind == MixerKind::kRelative ||
         kind == MixerKind::kGqa || kind == MixerKind::kShortConv;
}

class StateReuseTest : public ::testing::TestWithParam<MixerKind> {
 protected:
  std::unique_ptr<Engine> NewEngine(int64_t cache_bytes, EngineObserver* observer = nullptr,
                                    StateStore* store = nullptr) {
    if (!model_) model_ = TinyModel(GetParam());
    EngineOptions options;
    options.state_cache_bytes = cache_bytes;
    options.state_store = store;
    options.state_fingerprint = "tiny-model";
    options.state_cache_interval = 8;
    options.prefill_chunk = 16;
    return std::make_unique<Engine>(model_, TinyTokenizer(), options, clock_, observer);
  }
  Result Run(Engine& engine, const EngineRequest& request) {
    auto stream = std::make_shared<RequestStream>(10000);
    Result out;
    absl::Status submitted = engine.Submit(request, stream);
    if (!submitted.ok()) {
      out.last.status = submitted;
      return out;
    }
    for (int i = 0; i < 5000 && !out.done; ++i) {
      engine.RunOnce();
      for (const StreamEvent& event : stream->PopReady()) {
        out.ids.insert(out.ids.end(), event.token_ids.begin(), event.token_ids.end());
        out.logprobs.insert(out.logprobs.end(), event.logprobs.begin(), event.logprobs.end());
        if (event.last) {
          out.last = event;
          out.done = true;
        }
      }
    }
    EXPECT_TRUE(out.done);
    return out;
  }

  FakeClock clock_;
  CausalLm model_{nullptr};
};

TEST_P(StateReuseTest, CacheOnOrOffGivesTheSameTokens) {
  LookupLog log;
  auto cached = NewEngine(64 << 20, &log);
  auto plain = NewEngine(0);
  const EngineRequest first = GreedyRun(Tokens(21, 0), 10);
  const Result a = Run(*cached, first);
  ExpectSame(a, Run(*plain, first), "first");
  EXPECT_EQ(a.last.cached_tokens, 0);
  EXPECT_EQ(a.last.prefilled_tokens, 21);

  // The same prompt again: its end was cached with the logits after it.
  const Result again = Run(*cached, first);
  ExpectSame(again, a, "again");
  EXPECT_EQ(again.last.cached_tokens, 21);
  EXPECT_EQ(again.last.prefilled_tokens, 0);

  // A next turn: the prompt, the reply and more. The state at the reply's
  // end (all but its last token) was cached when the first request ended.
  const EngineRequest turn = GreedyRun(Concat(Concat(first.prompt, a.ids), Tokens(7, 100)), 10);
  const Result b = Run(*cached, turn);
  ExpectSame(b, Run(*plain, turn), "next turn");
  EXPECT_EQ(b.last.cached_tokens, 21 + 10 - 1);
  // And Score over the whole sequence, read from the start, agrees.
  EngineRequest score;
  score.kind = EngineRequest::Kind::kScore;
  score.prompt = Concat(turn.prompt, b.ids);
  const Result scored = Run(*cached, score);
  ASSERT_EQ(scored.logprobs.size(), score.prompt.size());
  for (size_t i = 0; i < b.logprobs.size(); ++i) {
    EXPECT_NEAR(b.logprobs[i], scored.logprobs[turn.prompt.size() + i], 1e-4) << i;
  }

  // A shared beginning, then something else: a checkpoint every 8 tokens.
  const EngineRequest other = GreedyRun(Concat(Tokens(19, 0), Tokens(9, 7)), 6);
  const Result c = Run(*cached, other);
  ExpectSame(c, Run(*plain, other), "shared beginning");
  EXPECT_EQ(c.last.cached_tokens, 16);

  EXPECT_EQ(log.reused_, (std::vector<int64_t>{0, 21, 30, 16}));
  EXPECT_GT(cached->load().cache_entries, 0);
  EXPECT_EQ(plain->load().cache_entries, 0);

  // The prompt's end is cached after its first token goes out, or as the
  // sequence ends when that token is its last.
  const EngineRequest one = GreedyRun(Tokens(13, 50), 1);
  const Result d = Run(*cached, one);
  ExpectSame(d, Run(*plain, one), "one token");
  const Result d_again = Run(*cached, one);
  ExpectSame(d_again, d, "one token again");
  EXPECT_EQ(d_again.last.cached_tokens, 13);
  EXPECT_EQ(d_again.last.prefilled_tokens, 0);
}

// A chat whose history is resent every turn, on a model whose state grows
// (a key/value cache, or a hybrid's attention layers): each save continues
// the entry the turn started from, so the turns and the checkpoints every 8
// tokens view one block of keys and values instead of a copy each.
TEST_P(StateReuseTest, AConversationHoldsItsKeysAndValuesOnce) {
  if (!KeepsKeysAndValues(GetParam())) GTEST_SKIP() << "no key/value cache";
  model_ = TinyModel(GetParam());
  auto cached = NewEngine(64 << 20);
  auto plain = NewEngine(0);
  std::vector<int64_t> prompt = Tokens(300, 3);
  int64_t cached_turn = 0;  // the tokens of the last turn's finished state
  for (int turn = 0; turn < 3; ++turn) {
    const EngineRequest request = GreedyRun(prompt, 6);
    const Result got = Run(*cached, request);
    ExpectSame(got, Run(*plain, request), "turn " + std::to_string(turn));
    EXPECT_EQ(got.last.cached_tokens, cached_turn) << "turn " << turn;
    cached_turn = static_cast<int64_t>(prompt.size() + got.ids.size()) - 1;
    prompt = Concat(Concat(prompt, got.ids), Tokens(7, 40 + turn));
  }
  // About 25 entries of 16 to 330 tokens (a checkpoint per 16-token chunk,
  // each turn's end and finish): copies would hold about nine times the
  // keys and values of one sequence at 512 tokens.
  EXPECT_GT(cached->load().cache_entries, 20);
  EXPECT_LT(cached->load().cache_bytes, 3 * model_->state_bytes_per_sequence(512));
}

// Many questions about one document (retrieval, a shared system prompt):
// each request is the document and a question of its own, in a cache that
// holds about three such sequences, as LFM2-350M's default 256 MiB holds
// three of 3,400 tokens. The first continuation writes into the room the
// document's entry left behind it, every other one copies the entry;
// however many copies come and go, the document's entry is the most
// recently used and stays, so no question prefills the document again.
TEST_P(StateReuseTest, QuestionsAboutOneDocumentEachStartFromIt) {
  if (!KeepsKeysAndValues(GetParam())) GTEST_SKIP() << "no key/value cache";
  model_ = TinyModel(GetParam());
  const std::vector<int64_t> document = Tokens(300, 3);
  auto cached = NewEngine(model_->state_bytes_per_sequence(300) * 16 / 5);
  auto plain = NewEngine(0);
  ASSERT_TRUE(Run(*cached, GreedyRun(document, 2)).last.status.ok());
  for (int question = 0; question < 8; ++question) {
    const EngineRequest request = GreedyRun(Concat(document, Tokens(7, 40 + 9 * question)), 2);
    const Result got = Run(*cached, request);
    ExpectSame(got, Run(*plain, request), "question " + std::to_string(question));
    EXPECT_EQ(got.last.cached_tokens, 300) << "question " << question;
  }
}

// The shared tier (in memory here; Redis in state_store_test.cc and
// state_store_redis.sh): an engine with no local cache stores the state at
// its prompt's end, another (a replica) continues a longer prompt from it
// with the same tokens as from zero, and an entry that does not verify is a
// miss, never served.
TEST_P(StateReuseTest, AReplicaContinuesFromTheSharedTier) {
  InMemoryStateStore store;
  auto writer = NewEngine(0, nullptr, &store);
  auto replica = NewEngine(0, nullptr, &store);
  auto plain = NewEngine(0);
  const EngineRequest first = GreedyRun(Tokens(40, 3), 5);
  ExpectSame(Run(*writer, first), Run(*plain, first), "first");
  ASSERT_GT(store.entries(), 0);

  const EngineRequest longer = GreedyRun(Concat(first.prompt, Tokens(9, 200)), 8);
  const Result from_zero = Run(*plain, longer);
  const Result resumed = Run(*replica, longer);
  ExpectSame(resumed, from_zero, "resumed");
  EXPECT_EQ(resumed.last.cached_tokens, 40);
  EXPECT_EQ(resumed.last.prefilled_tokens, 9);

  ASSERT_GT(
      store.EditEntries("tiny-model", [](std::string* bytes) { (*bytes)[bytes->size() / 2] ^= 1; }),
      0);
  auto another = NewEngine(0, nullptr, &store);
  const Result damaged = Run(*another, longer);
  ExpectSame(damaged, from_zero, "after an edit");
  EXPECT_EQ(damaged.last.cached_tokens, 0);
}

TEST_P(StateReuseTest, ReturnedStateContinuesAsIfUninterrupted) {
  auto engine = NewEngine(0);
  EngineRequest first = GreedyRun(Tokens(13, 5), 9);
  first.return_state = true;
  const Result a = Run(*engine, first);
  ASSERT_TRUE(a.last.status.ok()) << a.last.status;
  ASSERT_NE(a.last.state, nullptr);
  const std::vector<int64_t> covered = Concat(first.prompt, a.ids);
  EXPECT_EQ(a.last.state_token_ids, covered);  // the last generated token too
  EXPECT_EQ(a.last.state_tokens, 22);

  EngineRequest next = GreedyRun(Tokens(6, 50), 9);
  next.start_state = a.last.state;
  next.start_tokens = a.last.state_tokens;
  next.return_state = true;
  const Result b = Run(*engine, next);
  ExpectSame(b, Run(*engine, GreedyRun(Concat(covered, next.prompt), 9)), "resumed");
  EXPECT_EQ(b.last.cached_tokens, 22);
  EXPECT_EQ(b.last.prefilled_tokens, 6);
  EXPECT_EQ(b.last.state_tokens, 22 + 6 + 9);
}

TEST_P(StateReuseTest, AStateOfAnotherModelIsRefusedAndOthersGoOn) {
  auto engine = NewEngine(0);
  // A state of the same kind at half the width does not fit.
  LmConfig config = attn::testing::TinyConfig(GetParam());
  config.d_model /= 2;
  CausalLm other(config);
  other->eval();
  LmState state = other->initial_state(1, torch::kCPU);
  auto foreign = std::make_shared<SavedRow>();
  foreign->tensors = other->SaveRow(state, 0);

  EngineRequest bad = GreedyRun(Tokens(4, 1), 3);
  bad.start_state = foreign;
  bad.start_tokens = 0;
  const Result refused = Run(*engine, bad);
  EXPECT_EQ(refused.last.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.last.status.message().find("state"), std::string::npos);

  const Result fine = Run(*engine, GreedyRun(Tokens(4, 1), 3));
  EXPECT_TRUE(fine.last.status.ok());
  EXPECT_EQ(engine->load().running, 0);
}

INSTANTIATE_TEST_SUITE_P(EveryKind, StateReuseTest, ::testing::ValuesIn(AllMixerKinds()),
                         attn::testing::KindTestName<::testing::TestParamInfo<MixerKind>>);

// --- The cache itself ---

std::shared_ptr<const CachedState> StateOf(float value, int64_t floats, bool logits = false) {
  auto state = std::make_shared<CachedState>();
  state->row.tensors.push_back(torch::full({floats}, value));
  if (logits) state->logits.assign(4, value);
  return state;
}

TEST(StateCacheTest, FindsTheLongestVerifiedPrefix) {
  StateCache cache(1 << 20);
  const std::vector<int64_t> tokens = {5, 6, 7, 8, 9, 10};
  cache.Insert(absl::MakeSpan(tokens).subspan(0, 2), StateOf(2, 8));
  cache.Insert(absl::MakeSpan(tokens).subspan(0, 4), StateOf(4, 8));
  cache.Insert(tokens, StateOf(6, 8));  // no logits: usable only as a prefix

  EXPECT_EQ(cache.Lookup(tokens).tokens, 4);  // all six need logits
  EXPECT_EQ(cache.Lookup({5, 6, 7, 8, 9, 10, 11}).tokens, 6);
  EXPECT_EQ(cache.Lookup({5, 6, 7, 1}).tokens, 2);
  EXPECT_EQ(cache.Lookup({6, 5, 7, 8, 9}).tokens, 0);
  const StateCache::Hit hit = cache.Lookup({5, 6, 7, 8, 0});
  ASSERT_EQ(hit.tokens, 4);
  EXPECT_EQ(hit.state->row.tensors[0][0].item<float>(), 4);

  cache.Insert(tokens, StateOf(6, 8, /*logits=*/true));  // replaces the entry
  EXPECT_EQ(cache.Lookup(tokens).tokens, 6);
  EXPECT_EQ(cache.entries(), 3);
}

TEST(StateCacheTest, KeysAreVerifiedAgainstTheStoredTokens) {
  StateCache cache(1 << 20);
  // Distinct sequences have distinct key chains, and the same sequence the
  // same chain: the keys depend on every token and on the order.
  EXPECT_EQ(StateCache::Keys({1, 2, 3}), StateCache::Keys({1, 2, 3}));
  EXPECT_NE(StateCache::Keys({1, 2, 3}).back(), StateCache::Keys({2, 1, 3}).back());
  EXPECT_NE(StateCache::Keys({1, 2}).back(), StateCache::Keys({1, 2, 0}).back());
  EXPECT_EQ(StateCache::Key({4, 5, 6}), StateCache::Keys({4, 5, 6}).back());
  cache.Insert({1, 2, 3}, StateOf(1, 8));
  EXPECT_TRUE(cache.Contains({1, 2, 3}));
  EXPECT_FALSE(cache.Contains({1, 2}));
  EXPECT_FALSE(cache.Contains({1, 2, 4}));
}

TEST(StateCacheTest, EvictsTheLeastRecentlyUsedToStayWithinItsBytes) {
  // Each entry: 64 floats (256 bytes) and two tokens (8 bytes).
  StateCache cache(3 * 264);
  cache.Insert({1, 1}, StateOf(1, 64));
  cache.Insert({2, 2}, StateOf(2, 64));
  cache.Insert({3, 3}, StateOf(3, 64));
  EXPECT_EQ(cache.bytes(), 3 * 264);
  EXPECT_EQ(cache.Lookup({1, 1, 9}).tokens, 2);  // 1 is now the most recent
  cache.Insert({4, 4}, StateOf(4, 64));          // 2 goes
  EXPECT_EQ(cache.entries(), 3);
  EXPECT_EQ(cache.Lookup({2, 2, 9}).tokens, 0);
  EXPECT_EQ(cache.Lookup({1, 1, 9}).tokens, 2);
  EXPECT_EQ(cache.Lookup({3, 3, 9}).tokens, 2);
  EXPECT_EQ(cache.Lookup({4, 4, 9}).tokens, 2);
  cache.Insert({5, 5}, StateOf(5, 1000));  // larger than the whole cache: not kept
  EXPECT_EQ(cache.entries(), 3);
  EXPECT_LE(cache.bytes(), cache.capacity_bytes());
}

TEST(StateCacheTest, EntriesThatViewOneMemoryCountItOnce) {
  // Two turns of a conversation: the later entry views the earlier one's
  // memory of 64 floats (256 bytes), 48 of them where the earlier sees 32.
  const torch::Tensor memory = torch::zeros({64});
  auto first = std::make_shared<CachedState>();
  first->row.tensors.push_back(memory.narrow(0, 0, 32));
  auto second = std::make_shared<CachedState>();
  second->row.tensors.push_back(memory.narrow(0, 0, 48));
  StateCache cache(576);
  cache.Insert({1, 2}, first);
  EXPECT_EQ(cache.bytes(), 256 + 8);
  cache.Insert({1, 2, 3}, second);
  EXPECT_EQ(cache.bytes(), 256 + 8 + 12);  // the memory once, the tokens of both
  cache.Insert({7}, StateOf(7, 64));
  EXPECT_EQ(cache.entries(), 3);
  // Dropping one viewer frees only its tokens: the next entry takes both.
  cache.Insert({8}, StateOf(8, 64));
  EXPECT_EQ(cache.entries(), 2);
  EXPECT_EQ(cache.Lookup({1, 2, 3, 4}).tokens, 0);
  EXPECT_EQ(cache.bytes(), 2 * 260);
}

TEST(StateCacheTest, MovedEntriesKeepTheirPlaceAndLetTheirMemoryGo) {
  // A document's state and a checkpoint inside it view one memory of 64
  // floats; a question's copy (another 64) holds the same beginning.
  const torch::Tensor old_memory = torch::zeros({64}), new_memory = torch::ones({64});
  auto view = [](const torch::Tensor& memory, int64_t floats, bool logits) {
    auto state = std::make_shared<CachedState>();
    state->row.tensors.push_back(memory.narrow(0, 0, floats));
    if (logits) state->logits.assign(4, 0);
    return state;
  };
  StateCache cache(1 << 20);
  cache.Insert({1, 2}, view(old_memory, 16, false));
  cache.Insert({1, 2, 3}, view(old_memory, 24, true));
  cache.Insert({9}, StateOf(9, 64));
  EXPECT_EQ(cache.Lookup({1, 2, 3, 4}).tokens, 3);  // the document is the most recent
  const int64_t before = cache.bytes();
  int calls = 0;
  cache.Move({1, 2, 3, 4}, [&](const CachedState& entry) -> std::shared_ptr<const CachedState> {
    ++calls;
    return view(new_memory, entry.row.tensors[0].size(0), !entry.logits.empty());
  });
  EXPECT_EQ(calls, 2);               // {1, 2} and {1, 2, 3}; {9} is no beginning of the tokens
  EXPECT_EQ(cache.bytes(), before);  // one memory of 64 floats for another
  const StateCache::Hit hit = cache.Lookup({1, 2, 3});
  ASSERT_EQ(hit.tokens, 3);
  EXPECT_EQ(hit.state->row.tensors[0][0].item<float>(), 1);  // the new memory
  EXPECT_EQ(hit.state->logits.size(), 4u);
  // The copy's own entry adds no memory; {9}, the least recent, goes first.
  auto copy = std::make_shared<CachedState>();
  copy->row.tensors.push_back(new_memory.narrow(0, 0, 32));
  cache.Insert({1, 2, 3, 4}, copy);
  EXPECT_EQ(cache.bytes(), before + 16);
  // Room for one memory and the two entries' tokens: the document stays
  // with its question, where before the move both memories would not fit
  // and the document, older than the copy, would go.
  StateCache tight(256 + 12 + 16);
  const StateCache::Mover onto_new = [&](const CachedState&) {
    return std::shared_ptr<const CachedState>(view(new_memory, 24, false));
  };
  tight.Insert({9}, StateOf(9, 64));
  tight.Insert({1, 2, 3}, view(old_memory, 24, false));
  tight.Insert({1, 2, 3, 4}, copy, kEmptySequenceOrigin, onto_new);
  EXPECT_EQ(tight.Lookup({1, 2, 3, 5}).tokens, 3);
  EXPECT_EQ(tight.Lookup({9, 9}).tokens, 0);
  // A copy the cache cannot keep moves nothing onto its memory.
  const torch::Tensor huge = torch::zeros({1000});
  auto too_big = std::make_shared<CachedState>();
  too_big->row.tensors.push_back(huge.narrow(0, 0, 32));
  tight.Insert({1, 2, 3, 6}, too_big, kEmptySequenceOrigin, [&](const CachedState&) {
    return std::shared_ptr<const CachedState>(view(huge, 24, false));
  });
  EXPECT_LE(tight.bytes(), tight.capacity_bytes());
  ASSERT_EQ(tight.Lookup({1, 2, 3, 5}).tokens, 3);
  EXPECT_EQ(tight.Lookup({1, 2, 3, 5}).state->row.tensors[0][0].item<float>(), 1);
}

}  // namespace state_reuse_test
}  // namespace attn::serving
