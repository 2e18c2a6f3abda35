// The engine's scheduler alone (server/engine/scheduler.h): sequences the
// test makes stand for the engine's (a puppet: no model, no backend), and
// a fake clock moves deadlines.
#include "server/engine/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <vector>

#include "tests/server/fake_clock.h"

namespace attn::serving::engine_internal {
namespace {

using attn::testing::FakeClock;

// A sequence with a prompt of `prompt` tokens, `prefilled` of them read.
std::unique_ptr<Sequence> Puppet(int64_t prompt, int64_t prefilled = 0, int64_t reservation = 1) {
  auto seq = std::make_unique<Sequence>();
  seq->request.prompt.assign(prompt, 7);
  seq->prefilled = prefilled;
  seq->reservation = reservation;
  seq->stream = std::make_shared<RequestStream>(4);
  return seq;
}

// A sequence decoding: its prompt read, a token to feed.
std::unique_ptr<Sequence> Decoding(int64_t generated, int64_t last_decoded) {
  auto seq = Puppet(4, 4);
  seq->next_token = 5;
  seq->generated = generated;
  seq->last_decoded = last_decoded;
  return seq;
}

TEST(SchedulerTest, AdmitsFirstComeFirstServedWithinSlotsAndBudget) {
  EngineOptions options;
  const Scheduler scheduler(options, false);
  FakeClock clock;
  std::deque<std::unique_ptr<Sequence>> waiting;
  for (int64_t reservation : {4, 3, 5, 1}) waiting.push_back(Puppet(10, 0, reservation));
  Sequence* third = waiting[2].get();

  // Two free slots, a budget of 10 of which 1 is held: 4 and 3 start.
  int64_t reserved = 1;
  Scheduler::Admissions first = scheduler.Admit(&waiting, clock.Now(), 2, 10, &reserved);
  ASSERT_EQ(first.admitted.size(), 2u);
  EXPECT_EQ(first.admitted[0]->reservation, 4);
  EXPECT_EQ(first.admitted[1]->reservation, 3);
  EXPECT_EQ(reserved, 8);
  EXPECT_TRUE(first.dropped.empty());

  // The front (5) does not fit beside 8: it waits, and 1 does not pass it.
  Scheduler::Admissions blocked = scheduler.Admit(&waiting, clock.Now(), 3, 10, &reserved);
  EXPECT_TRUE(blocked.admitted.empty());
  ASSERT_EQ(waiting.size(), 2u);
  EXPECT_EQ(waiting.front().get(), third);

  // Room again: both start, in order.
  reserved = 0;
  Scheduler::Admissions later = scheduler.Admit(&waiting, clock.Now(), 3, 10, &reserved);
  ASSERT_EQ(later.admitted.size(), 2u);
  EXPECT_EQ(later.admitted[0].get(), third);
  EXPECT_TRUE(waiting.empty());
}

TEST(SchedulerTest, QueuedRequestsCancelledOrPastTheirDeadlineAreDropped) {
  EngineOptions options;
  const Scheduler scheduler(options, false);
  FakeClock clock;
  std::deque<std::unique_ptr<Sequence>> waiting;
  waiting.push_back(Puppet(10));
  waiting.back()->request.deadline = clock.Now() + absl::Seconds(1);
  waiting.push_back(Puppet(10));
  waiting.back()->stream->Cancel();
  waiting.push_back(Puppet(10));
  int64_t reserved = 0;
  // No slot free: nothing starts, the cancelled one goes.
  Scheduler::Admissions now = scheduler.Admit(&waiting, clock.Now(), 0, 10, &reserved);
  ASSERT_EQ(now.dropped.size(), 1u);
  EXPECT_EQ(now.dropped[0].second.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(waiting.size(), 2u);
  clock.Advance(absl::Seconds(1));
  Scheduler::Admissions later = scheduler.Admit(&waiting, clock.Now(), 0, 10, &reserved);
  ASSERT_EQ(later.dropped.size(), 1u);
  EXPECT_EQ(later.dropped[0].second.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(waiting.size(), 1u);
}

TEST(SchedulerTest, RunningSequencesEndWhenCancelledOrLate) {
  EngineOptions options;
  const Scheduler scheduler(options, false);
  FakeClock clock;
  Sequences active;
  active.push_back(Decoding(3, 0));
  active.push_back(Decoding(3, 0));
  active.back()->request.deadline = clock.Now() + absl::Milliseconds(10);
  active.push_back(Decoding(3, 0));
  active.back()->stream->Cancel();
  auto ended = scheduler.Abandoned(active, clock.Now());
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].first, active[2].get());
  clock.Advance(absl::Milliseconds(10));
  ended = scheduler.Abandoned(active, clock.Now());
  ASSERT_EQ(ended.size(), 2u);
  EXPECT_EQ(ended[0].first, active[1].get());
  EXPECT_EQ(ended[0].second.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(SchedulerTest, ChunksEndAtCacheCheckpoints) {
  EngineOptions options;
  options.prefill_chunk = 64;
  options.state_cache_interval = 48;
  const Scheduler cached(options, true), uncached(options, false);
  EXPECT_EQ(cached.ChunkLength(*Puppet(200, 0)), 48);
  EXPECT_EQ(cached.ChunkLength(*Puppet(200, 40)), 8);
  EXPECT_EQ(cached.ChunkLength(*Puppet(200, 196)), 4);
  EXPECT_EQ(uncached.ChunkLength(*Puppet(200, 40)), 64);
  // A score is never cached: its chunks are whole.
  auto score = Puppet(200, 40);
  score->request.kind = EngineRequest::Kind::kScore;
  EXPECT_EQ(cached.ChunkLength(*score), 64);
}

TEST(SchedulerTest, PrefillGroupsPromptsAtOnePositionWithinAChunk) {
  EngineOptions options;
  options.prefill_chunk = 16;
  const Scheduler scheduler(options, false);
  Sequences active;
  active.push_back(Decoding(2, 0));  // not prefilling
  active.push_back(Puppet(8));       // the oldest prompt: 8 tokens at 0
  active.push_back(Puppet(8));       // joins it
  active.push_back(Puppet(8, 4));    // another position
  active.push_back(Puppet(20));      // another chunk length (16)
  active.push_back(Puppet(8));       // a third of 8 would pass 16 tokens
  active.push_back(Puppet(8));
  active.back()->fetch = std::make_shared<StoreFetch>();  // waits for the tier
  std::vector<Sequence*> group = scheduler.PrefillGroup(active);
  ASSERT_EQ(group.size(), 2u);
  EXPECT_EQ(group[0], active[1].get());
  EXPECT_EQ(group[1], active[2].get());

  // A score at the front is prefilled alone.
  Sequences scored;
  scored.push_back(Puppet(8));
  scored.back()->request.kind = EngineRequest::Kind::kScore;
  scored.push_back(Puppet(8));
  EXPECT_EQ(scheduler.PrefillGroup(scored).size(), 1u);
}

TEST(SchedulerTest, DecodeBatchTakesTheLeastServedUpToItsCap) {
  EngineOptions options;
  options.max_decode_rows = 2;
  const Scheduler scheduler(options, false);
  Sequences active;
  active.push_back(Decoding(9, 5));
  active.push_back(Decoding(1, 7));
  active.push_back(Decoding(1, 3));  // as few tokens, and longer unserved
  active.push_back(Decoding(0, 8));
  for (int i = 0; i < 4; ++i) active.back()->stream->Push(StreamEvent());  // its reader is full
  active.push_back(Puppet(8));                                             // still prefilling
  std::vector<Sequence*> batch = scheduler.DecodeBatch(active);
  ASSERT_EQ(batch.size(), 2u);
  std::sort(batch.begin(), batch.end());
  std::vector<Sequence*> expected = {active[1].get(), active[2].get()};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(batch, expected);
}

}  // namespace
}  // namespace attn::serving::engine_internal
