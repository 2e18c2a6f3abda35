// attnctl bench: a load generator. Keeps `concurrency` GenerateStream calls
// open for `duration` (each finished stream is replaced by a new one), or
// starts them at a fixed mean `rate`, and reports time to first token and
// inter-token latency percentiles, tokens/s, errors, and how fast rejected
// calls were told. Streams can read slowly (`read_delay`) to hold many open
// streams at once. Over gRPC by default, or over the OpenAI HTTP API.
#pragma once
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/time/time.h"

namespace attn::client {

struct BenchOptions {
  std::string model;
  int concurrency = 8;
  // > 0: an open loop instead. Streams start at Poisson arrivals of `rate`
  // per second whatever the server's pace, as independent users would, and
  // `concurrency` is ignored. Used to overload the server on purpose; calls
  // it rejects (RESOURCE_EXHAUSTED) are timed separately.
  double rate = 0;
  int64_t prompt_tokens = 128;
  int64_t max_tokens = 64;
  absl::Duration duration = absl::Seconds(10);
  absl::Duration read_delay = absl::ZeroDuration();  // between reads of one stream
  int64_t total_streams = 0;  // > 0: stop after this many streams instead of `duration`
  bool progress = true;
  bool json = false;  // the report as one JSON object
  // Each stream's prompt differs from every other's in its first tokens, as
  // different users' would: no stream starts from another's cached state.
  // False: every stream sends the same prompt.
  bool distinct_prompts = true;
  // Not empty: host:port of the server's OpenAI HTTP API. The same load as
  // streamed /v1/completions (Server-Sent Events, plain HTTP), a thread per
  // open stream, at `concurrency` (no `rate` or `read_delay`); `api_key`
  // goes with each request.
  std::string http;
  std::string api_key;
};

// Runs the benchmark and prints the report; returns the process exit code
// (1 when every stream failed).
int RunBench(const std::shared_ptr<grpc::Channel>& channel, const BenchOptions& options);

}  // namespace attn::client
