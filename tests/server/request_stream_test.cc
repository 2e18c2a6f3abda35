#include "server/engine/request_stream.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "server/engine/delivery_thread.h"

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

// What a listener saw: the thread it ran on and the events it popped.
struct Received {
  std::mutex mu;
  std::vector<std::thread::id> threads;
  std::vector<int64_t> ids;
  int calls = 0;
  absl::Notification last;
};

void Listen(RequestStream& stream, Received* received) {
  stream.SetListener([&stream, received] {
    std::vector<StreamEvent> events = stream.PopReady();
    std::lock_guard<std::mutex> lock(received->mu);
    ++received->calls;
    received->threads.push_back(std::this_thread::get_id());
    const std::vector<int64_t> ids = Ids(events);
    received->ids.insert(received->ids.end(), ids.begin(), ids.end());
    if (!events.empty() && events.back().last && !received->last.HasBeenNotified()) {
      received->last.Notify();
    }
  });
}

TEST(RequestStream, WithoutADeliveryThreadTheListenerRunsOnThePushingThread) {
  RequestStream stream(8);
  Received received;
  Listen(stream, &received);
  stream.Push(Token(1));
  ASSERT_EQ(received.threads.size(), 1u);
  EXPECT_EQ(received.threads[0], std::this_thread::get_id());
  EXPECT_EQ(received.ids, std::vector<int64_t>({1}));
}

TEST(DeliveryThread, RunsListenersOffThePushingThreadAndLosesNothing) {
  DeliveryThread delivery;
  constexpr int kStreams = 8;
  constexpr int kTokens = 500;
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<std::unique_ptr<Received>> received;
  for (int s = 0; s < kStreams; ++s) {
    streams.push_back(std::make_shared<RequestStream>(kTokens + 1, &delivery));
    received.push_back(std::make_unique<Received>());
    Listen(*streams.back(), received.back().get());
  }
  for (int t = 0; t < kTokens; ++t) {
    for (auto& stream : streams) stream->Push(Token(t));
  }
  for (auto& stream : streams) {
    StreamEvent last = Token(kTokens);
    last.last = true;
    stream->Push(std::move(last));
  }
  std::vector<int64_t> expected;
  for (int t = 0; t <= kTokens; ++t) expected.push_back(t);
  for (int s = 0; s < kStreams; ++s) {
    ASSERT_TRUE(received[s]->last.WaitForNotificationWithTimeout(absl::Seconds(30)));
    std::lock_guard<std::mutex> lock(received[s]->mu);
    EXPECT_EQ(received[s]->ids, expected) << "stream " << s;
    // Events that queued while the thread was busy share one call.
    EXPECT_LE(received[s]->calls, kTokens + 1);
    for (const auto& id : received[s]->threads) EXPECT_NE(id, std::this_thread::get_id());
  }
  for (auto& stream : streams) stream->ClearListener();
}

// A failure pushed behind tokens while their listener call was already due
// (PopReady leaves it queued) gets a call of its own: a reader that pops once
// per call, as a whole response does, sees it instead of waiting for ever.
TEST(DeliveryThread, AFailureLeftBehindTokensGetsItsOwnListenerCall) {
  DeliveryThread delivery;
  // The delivery thread is kept busy so that both events queue before the
  // stream's call runs.
  auto blocker = std::make_shared<RequestStream>(4, &delivery);
  absl::Notification running, go;
  blocker->SetListener([&] {
    running.Notify();
    go.WaitForNotification();
  });
  blocker->Push(Token(0));
  running.WaitForNotification();
  auto stream = std::make_shared<RequestStream>(8, &delivery);
  Received received;
  Listen(*stream, &received);
  stream->Push(Token(1));
  stream->Push(Failure());
  go.Notify();
  ASSERT_TRUE(received.last.WaitForNotificationWithTimeout(absl::Seconds(10)))
      << "the failure was never delivered";
  {
    std::lock_guard<std::mutex> lock(received.mu);
    EXPECT_EQ(received.ids, std::vector<int64_t>({1}));
    EXPECT_EQ(received.calls, 2);
  }
  blocker->ClearListener();
  stream->ClearListener();
}

TEST(DeliveryThread, KeepsAStreamAliveUntilItsListenerRanAndDrainsWhenDestroyed) {
  Received received;
  {
    DeliveryThread delivery;
    auto stream = std::make_shared<RequestStream>(4, &delivery);
    Listen(*stream, &received);
    StreamEvent last = Token(7);
    last.last = true;
    stream->Push(std::move(last));
    stream.reset();  // the delivery thread holds the only reference now
    // Leaving the scope joins the thread after it ran what was scheduled.
  }
  EXPECT_TRUE(received.last.HasBeenNotified());
  EXPECT_EQ(received.ids, std::vector<int64_t>({7}));
}

}  // namespace
}  // namespace attn::serving
