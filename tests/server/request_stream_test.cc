#include "server/request_stream.h"

#include <gtest/gtest.h>

#include <vector>

namespace attn::serving {
namespace {

StreamEvent Token(int64_t id) {
  StreamEvent event;
  event.token_ids = {id};
  event.text = "t" + std::to_string(id);
  return event;
}

StreamEvent Failure() {
  StreamEvent event;
  event.last = true;
  event.status = absl::InternalError("decode step failed");
  return event;
}

std::vector<int64_t> Ids(const std::vector<StreamEvent>& events) {
  std::vector<int64_t> ids;
  for (const auto& e : events) ids.insert(ids.end(), e.token_ids.begin(), e.token_ids.end());
  return ids;
}

TEST(RequestStream, PopReadyTakesEverythingQueuedInOrder) {
  RequestStream stream(8);
  EXPECT_TRUE(stream.PopReady().empty());
  for (int64_t id = 1; id <= 3; ++id) stream.Push(Token(id));
  EXPECT_EQ(Ids(stream.PopReady()), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(stream.PopReady().empty());
}

TEST(RequestStream, PopReadyStopsAfterTheLastEvent) {
  RequestStream stream(8);
  stream.Push(Token(1));
  StreamEvent last = Token(2);
  last.last = true;
  stream.Push(last);
  const auto events = stream.PopReady();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_TRUE(events.back().last);
}

TEST(RequestStream, AFailureBehindTokensWaitsForTheNextCall) {
  RequestStream stream(8);
  stream.Push(Token(1));
  stream.Push(Token(2));
  stream.Push(Failure());
  EXPECT_EQ(Ids(stream.PopReady()), (std::vector<int64_t>{1, 2}));
  const auto failure = stream.PopReady();
  ASSERT_EQ(failure.size(), 1u);
  EXPECT_EQ(failure[0].status.code(), absl::StatusCode::kInternal);
}

TEST(RequestStream, DrainingAFullQueueWakesTheEngine) {
  RequestStream stream(2);
  int wakes = 0;
  stream.SetWake([&] { ++wakes; });
  stream.Push(Token(1));
  stream.Push(Token(2));
  EXPECT_TRUE(stream.full());
  EXPECT_EQ(stream.PopReady().size(), 2u);
  EXPECT_FALSE(stream.full());
  EXPECT_EQ(wakes, 1);
}

}  // namespace
}  // namespace attn::serving
