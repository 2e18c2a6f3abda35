// attnctl bench's reading of streamed completions (client/sse.h): events
// split the same however the body is cut, and each chunk's tokens counted
// from what the HTTP API sends (server/http/openai_response.h).
#include "client/sse.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace attn::client {
namespace {

std::vector<std::string> Split(const std::vector<std::string>& pieces, std::string* rest) {
  EventSplitter splitter;
  std::vector<std::string> events;
  for (const std::string& piece : pieces) {
    EXPECT_TRUE(splitter
                    .Feed(piece,
                          [&](std::string_view data) {
                            events.emplace_back(data);
                            return absl::OkStatus();
                          })
                    .ok());
  }
  *rest = splitter.pending();
  return events;
}

TEST(EventSplitter, EventsAreTheSameWhereverTheBodyIsCut) {
  const std::string body =
      ": a comment\n\ndata: {\"a\": 1}\n\nid: 7\n\ndata: [DONE]\n\ndata: unfinished";
  std::string rest;
  const std::vector<std::string> whole = Split({body}, &rest);
  EXPECT_EQ(whole, (std::vector<std::string>{"{\"a\": 1}", "[DONE]"}));
  EXPECT_EQ(rest, "data: unfinished");
  for (size_t cut = 0; cut <= body.size(); ++cut) {
    std::string cut_rest;
    EXPECT_EQ(Split({body.substr(0, cut), body.substr(cut)}, &cut_rest), whole) << "cut at " << cut;
    EXPECT_EQ(cut_rest, rest);
  }
}

TEST(EventSplitter, TheCallersErrorStopsIt) {
  EventSplitter splitter;
  int calls = 0;
  const absl::Status status = splitter.Feed("data: 1\n\ndata: 2\n\n", [&](std::string_view) {
    ++calls;
    return absl::DataLossError("stop");
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(calls, 1);
}

TEST(CompletionChunkTokens, CountsTheChunksTokensAndRefusesWhatIsNoChunk) {
  EXPECT_EQ(*CompletionChunkTokens("[DONE]"), 0);
  EXPECT_EQ(*CompletionChunkTokens(R"({"choices": [{"text": "ab", "logprobs": {"tokens": ["a", "b"],
      "token_logprobs": [-1, -2]}}]})"),
            2);
  EXPECT_EQ(*CompletionChunkTokens(R"({"choices": [], "usage": {"completion_tokens": 8}})"), 0);
  EXPECT_EQ(*CompletionChunkTokens(R"({"choices": [{"text": "ab", "logprobs": null}]})"), 0);
  const absl::StatusOr<int64_t> error =
      CompletionChunkTokens(R"({"error": {"message": "the queue is full"}})");
  EXPECT_EQ(error.status().code(), absl::StatusCode::kUnknown);
  EXPECT_NE(error.status().message().find("the queue is full"), std::string::npos);
  for (const char* bad : {"", "{", "[1]", "7", R"({"choices": 3})", R"({"choices": [1]})"}) {
    EXPECT_EQ(CompletionChunkTokens(bad).status().code(), absl::StatusCode::kDataLoss) << bad;
  }
}

}  // namespace
}  // namespace attn::client
