#include "client/bench.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <queue>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "attn/v1/text_generation.grpc.pb.h"
#include "client/event_stream.h"
#include "client/sse.h"
#include "nlohmann/json.hpp"

namespace attn::client {
namespace {

using attn::v1::GenerateRequest;
using attn::v1::GenerateResponse;

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const auto index = static_cast<size_t>(p * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(index, values.size() - 1)];
}

// Calls functions at given times, for delayed reads (a reaction must not sleep).
class Timer {
 public:
  Timer() : thread_([this] { Run(); }) {}
  ~Timer() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    cv_.Signal();
    thread_.join();
  }
  void At(absl::Time when, std::function<void()> fn) {
    {
      absl::MutexLock lock(&mu_);
      queue_.push({when, seq_++, std::move(fn)});
    }
    cv_.Signal();
  }

 private:
  struct Item {
    absl::Time when;
    uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Item& other) const {
      return when != other.when ? when > other.when : seq > other.seq;
    }
  };
  void Run() {
    absl::MutexLock lock(&mu_);
    while (!stop_) {
      if (queue_.empty()) {
        cv_.Wait(&mu_);
        continue;
      }
      const absl::Time next = queue_.top().when;
      if (absl::Now() < next) {
        cv_.WaitWithDeadline(&mu_, next);
        continue;
      }
      Item item = queue_.top();
      queue_.pop();
      mu_.Unlock();
      item.fn();
      mu_.Lock();
    }
  }
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

struct Results {
  absl::Mutex mu;
  std::vector<double> ttft ABSL_GUARDED_BY(mu);         // seconds
  std::vector<double> inter_token ABSL_GUARDED_BY(mu);  // seconds
  int64_t tokens ABSL_GUARDED_BY(mu) = 0;
  int64_t completed ABSL_GUARDED_BY(mu) = 0;
  std::map<std::string, int64_t> errors ABSL_GUARDED_BY(mu);  // by status code and message
  // Seconds from the start of a call to its RESOURCE_EXHAUSTED status.
  std::vector<double> rejected ABSL_GUARDED_BY(mu);
};

// One stream's times: to its first message, and each token's share of the
// gaps after.
struct StreamTiming {
  explicit StreamTiming(absl::Time started) : started(started), last(started) {}
  // A message of `count` tokens arrived at `now`.
  void Tokens(absl::Time now, int64_t count) {
    if (first) {
      ttft = absl::ToDoubleSeconds(now - started);
      first = false;
    } else if (count > 0) {
      // The server merges tokens that queued during a write into one
      // message; each of them gets an equal share of the gap, so the gaps
      // still add up to the stream's duration.
      const double share = absl::ToDoubleSeconds(now - last) / static_cast<double>(count);
      gaps.insert(gaps.end(), count, share);
    }
    last = now;
    tokens += count;
  }
  double seconds() const { return absl::ToDoubleSeconds(absl::Now() - started); }

  absl::Time started, last;
  bool first = true;
  double ttft = 0;
  std::vector<double> gaps;
  int64_t tokens = 0;
};

class Bench;

class BenchStream : public grpc::ClientReadReactor<GenerateResponse> {
 public:
  BenchStream(Bench* bench, attn::v1::TextGeneration::Stub* stub, const GenerateRequest& request);
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  Bench* bench_;
  grpc::ClientContext context_;
  GenerateResponse response_;
  StreamTiming timing_;
};

class Bench {
 public:
  Bench(const std::shared_ptr<grpc::Channel>& channel, const BenchOptions& options)
      : stub_(attn::v1::TextGeneration::NewStub(channel)), options_(options) {}

  // `model` and `vocab`: the served model's name and vocabulary size.
  int Run(const std::vector<int64_t>& prompt, const std::string& model, int64_t vocab);
  // A gRPC stream ended: records it, deletes it, starts the next.
  void Finished(BenchStream* stream, const grpc::Status& status, const StreamTiming& timing);
  // A call that ended RESOURCE_EXHAUSTED `seconds` after it started.
  void Rejected(double seconds);
  Timer& timer() { return timer_; }
  absl::Duration read_delay() const { return options_.read_delay; }

 private:
  bool MoreToStart() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (options_.total_streams > 0) return started_ < options_.total_streams;
    return absl::Now() < end_;
  }
  void Launch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The request of the stream numbered `n`.
  GenerateRequest RequestFor(int64_t n) const;
  // `status` of a stream's call (its code and message) with its times.
  void Record(const absl::Status& status, const StreamTiming& timing);
  // Over HTTP: runs streams one after another while there are more to
  // start; `concurrency` of these run at once.
  void HttpWorker();
  absl::Status HttpStream(const GenerateRequest& request, StreamTiming& timing) const;
  // Open loop: starts streams at Poisson arrivals of options_.rate per second.
  void Arrivals();
  void Report(absl::Duration elapsed);
  void Progress(absl::Duration elapsed);

  std::unique_ptr<attn::v1::TextGeneration::Stub> stub_;
  BenchOptions options_;
  GenerateRequest request_;
  std::string model_;
  int64_t vocab_ = 0;
  Timer timer_;
  Results results_;
  absl::Time begin_;
  absl::Time end_;
  absl::Mutex mu_;
  int64_t started_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

BenchStream::BenchStream(Bench* bench, attn::v1::TextGeneration::Stub* stub,
                         const GenerateRequest& request)
    : bench_(bench), timing_(absl::Now()) {
  stub->async()->GenerateStream(&context_, &request, this);
  StartRead(&response_);
  StartCall();
}

void BenchStream::OnReadDone(bool ok) {
  if (!ok) return;  // OnDone follows
  const absl::Time now = absl::Now();
  timing_.Tokens(now, response_.token_ids_size());
  if (bench_->read_delay() > absl::ZeroDuration()) {
    // A hold keeps the call (and this reactor) alive while no read is
    // pending; without it, the call could end and delete the reactor
    // before the timer fires.
    AddHold();
    bench_->timer().At(now + bench_->read_delay(), [this] {
      StartRead(&response_);
      RemoveHold();
    });
  } else {
    StartRead(&response_);
  }
}

void BenchStream::OnDone(const grpc::Status& status) { bench_->Finished(this, status, timing_); }

GenerateRequest Bench::RequestFor(int64_t n) const {
  GenerateRequest request = request_;
  if (options_.distinct_prompts && request.prompt_token_ids_size() >= 2) {
    // The stream's number in its first two tokens: no two prompts share
    // more than a token, so no stream reuses another's state.
    const int64_t ids = vocab_ - 3;
    request.set_prompt_token_ids(0, 3 + n % ids);
    request.set_prompt_token_ids(1, 3 + (n / ids) % ids);
  }
  return request;
}

void Bench::Launch() {
  ++started_;
  ++in_flight_;
  new BenchStream(this, stub_.get(), RequestFor(started_));  // deletes itself via Finished
}

void Bench::Record(const absl::Status& status, const StreamTiming& timing) {
  if (status.code() == absl::StatusCode::kResourceExhausted) Rejected(timing.seconds());
  absl::MutexLock lock(&results_.mu);
  results_.tokens += timing.tokens;
  if (status.ok()) {
    ++results_.completed;
    results_.ttft.push_back(timing.ttft);
    results_.inter_token.insert(results_.inter_token.end(), timing.gaps.begin(), timing.gaps.end());
  } else {
    ++results_.errors[absl::StrCat(static_cast<int>(status.code()), " ", status.message())];
  }
}

void Bench::Finished(BenchStream* stream, const grpc::Status& status, const StreamTiming& timing) {
  Record(absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message()),
         timing);
  delete stream;
  absl::MutexLock lock(&mu_);
  --in_flight_;
  if (options_.rate <= 0 && MoreToStart()) Launch();
}

void Bench::Rejected(double seconds) {
  absl::MutexLock lock(&results_.mu);
  results_.rejected.push_back(seconds);
}

void Bench::Arrivals() {
  std::mt19937_64 random(1);
  std::exponential_distribution<double> gap(options_.rate);
  absl::Time next = begin_;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (!MoreToStart()) return;
      Launch();
    }
    next += absl::Seconds(gap(random));
    // Arrivals that fell behind (a slow client) start at once rather than
    // being dropped, so the offered rate holds on average.
    absl::SleepFor(next - absl::Now());
  }
}

void Bench::HttpWorker() {
  bool ran = false;
  while (true) {
    int64_t n = 0;
    {
      absl::MutexLock lock(&mu_);
      // One step under the lock, so that Run never sees none in flight
      // between one stream and the next.
      if (ran) --in_flight_;
      if (!MoreToStart()) return;
      n = ++started_;
      ++in_flight_;
    }
    StreamTiming timing(absl::Now());
    const absl::Status status = HttpStream(RequestFor(n), timing);
    Record(status, timing);
    ran = true;
  }
}

absl::Status Bench::HttpStream(const GenerateRequest& request, StreamTiming& timing) const {
  const nlohmann::json body = {
      {"model", model_},
      {"prompt",
       std::vector<int64_t>(request.prompt_token_ids().begin(), request.prompt_token_ids().end())},
      {"max_tokens", request.max_tokens()},
      {"temperature", 0},
      {"stream", true},
      {"logprobs", 0},  // each chunk lists its tokens, which the text may not show
      {"attn_ignore_eos", true}};
  return PostEventStream(options_.http, "/v1/completions", body.dump(), options_.api_key,
                         [&timing](std::string_view data) -> absl::Status {
                           const absl::StatusOr<int64_t> tokens = CompletionChunkTokens(data);
                           if (!tokens.ok()) return tokens.status();
                           if (data != "[DONE]") timing.Tokens(absl::Now(), *tokens);
                           return absl::OkStatus();
                         });
}

int Bench::Run(const std::vector<int64_t>& prompt, const std::string& model, int64_t vocab) {
  model_ = model;
  vocab_ = vocab;
  request_.set_model(options_.model);
  for (int64_t id : prompt) request_.add_prompt_token_ids(id);
  request_.set_max_tokens(static_cast<int32_t>(options_.max_tokens));
  request_.set_temperature(0.0f);
  request_.set_ignore_eos(true);
  begin_ = absl::Now();
  end_ = begin_ + options_.duration;
  std::thread arrivals;
  std::vector<std::thread> http_workers;
  if (!options_.http.empty()) {
    for (int i = 0; i < options_.concurrency; ++i) {
      http_workers.emplace_back([this] { HttpWorker(); });
    }
  } else if (options_.rate > 0) {
    arrivals = std::thread([this] { Arrivals(); });
  } else {
    absl::MutexLock lock(&mu_);
    for (int i = 0; i < options_.concurrency && MoreToStart(); ++i) Launch();
  }
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return in_flight_ == 0 && (options_.rate <= 0 || !MoreToStart());
  };
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(1))) break;
    }
    if (options_.progress) Progress(absl::Now() - begin_);
  }
  if (arrivals.joinable()) arrivals.join();
  for (std::thread& worker : http_workers) worker.join();
  const absl::Duration elapsed = absl::Now() - begin_;
  if (options_.progress) std::fprintf(stderr, "\n");
  Report(elapsed);
  absl::MutexLock lock(&results_.mu);
  return results_.completed == 0 ? 1 : 0;
}

void Bench::Progress(absl::Duration elapsed) {
  int64_t in_flight = 0;
  {
    absl::MutexLock lock(&mu_);
    in_flight = in_flight_;
  }
  absl::MutexLock lock(&results_.mu);
  int64_t errors = 0;
  for (const auto& [code, count] : results_.errors) errors += count;
  std::fprintf(stderr, "\r%6.1fs  streams done %-7ld open %-6ld tokens %-9ld errors %-5ld",
               absl::ToDoubleSeconds(elapsed), static_cast<long>(results_.completed),
               static_cast<long>(in_flight), static_cast<long>(results_.tokens),
               static_cast<long>(errors));
}

void Bench::Report(absl::Duration elapsed) {
  const double seconds = absl::ToDoubleSeconds(elapsed);
  absl::MutexLock lock(&results_.mu);
  int64_t errors = 0;
  for (const auto& [code, count] : results_.errors) errors += count;
  const double ms = 1000.0;
  const auto percentiles = [ms](const std::vector<double>& values) {
    return absl::StrFormat("{\"p50\": %.3f, \"p95\": %.3f, \"p99\": %.3f, \"max\": %.3f}",
                           Percentile(values, 0.5) * ms, Percentile(values, 0.95) * ms,
                           Percentile(values, 0.99) * ms, Percentile(values, 1.0) * ms);
  };
  if (options_.json) {
    std::printf(
        "{\"concurrency\": %d, \"rate\": %.3f, \"prompt_tokens\": %ld, \"max_tokens\": %ld, "
        "\"seconds\": %.3f, \"streams\": %ld, \"errors\": %ld, \"rejected\": %zu, "
        "\"tokens\": %ld, \"tokens_per_s\": %.2f, \"ttft_ms\": %s, \"itl_ms\": %s, "
        "\"reject_ms\": %s}\n",
        options_.rate > 0 ? 0 : options_.concurrency, options_.rate,
        static_cast<long>(options_.prompt_tokens), static_cast<long>(options_.max_tokens), seconds,
        static_cast<long>(results_.completed), static_cast<long>(errors), results_.rejected.size(),
        static_cast<long>(results_.tokens), results_.tokens / seconds,
        percentiles(results_.ttft).c_str(), percentiles(results_.inter_token).c_str(),
        percentiles(results_.rejected).c_str());
    return;
  }
  std::printf("streams %ld ok, %ld failed in %.1f s; %ld tokens, %.1f tokens/s\n",
              static_cast<long>(results_.completed), static_cast<long>(errors), seconds,
              static_cast<long>(results_.tokens), results_.tokens / seconds);
  std::printf("time to first token  p50 %8.2f ms  p95 %8.2f ms  p99 %8.2f ms\n",
              Percentile(results_.ttft, 0.5) * ms, Percentile(results_.ttft, 0.95) * ms,
              Percentile(results_.ttft, 0.99) * ms);
  std::printf("inter-token latency  p50 %8.2f ms  p95 %8.2f ms  p99 %8.2f ms\n",
              Percentile(results_.inter_token, 0.5) * ms,
              Percentile(results_.inter_token, 0.95) * ms,
              Percentile(results_.inter_token, 0.99) * ms);
  if (!results_.rejected.empty()) {
    std::printf("rejected in          p50 %8.2f ms  p99 %8.2f ms  max %8.2f ms (%zu calls)\n",
                Percentile(results_.rejected, 0.5) * ms, Percentile(results_.rejected, 0.99) * ms,
                Percentile(results_.rejected, 1.0) * ms, results_.rejected.size());
  }
  for (const auto& [code, count] : results_.errors) {
    std::printf("error x%ld: %s\n", static_cast<long>(count), code.c_str());
  }
}

}  // namespace

int RunBench(const std::shared_ptr<grpc::Channel>& channel, const BenchOptions& options) {
  // A prompt of the requested length, from ids the model knows.
  auto stub = attn::v1::TextGeneration::NewStub(channel);
  grpc::ClientContext context;
  attn::v1::ListModelsResponse models;
  grpc::Status status = stub->ListModels(&context, attn::v1::ListModelsRequest(), &models);
  if (!status.ok()) {
    std::fprintf(stderr, "error: ListModels: %s\n", status.error_message().c_str());
    return 1;
  }
  int64_t vocab = 0;
  std::string name;
  for (const auto& model : models.models()) {
    if (model.name() == options.model || (options.model.empty() && model.is_default())) {
      vocab = model.vocab_size();
      name = model.name();
    }
  }
  if (vocab == 0) {
    std::fprintf(stderr, "error: --model=%s is not hosted by the server\n", options.model.c_str());
    return 1;
  }
  std::vector<int64_t> prompt(options.prompt_tokens);
  for (int64_t i = 0; i < options.prompt_tokens; ++i) prompt[i] = 3 + (i * 7919) % (vocab - 3);
  Bench bench(channel, options);
  return bench.Run(prompt, name, vocab);
}

}  // namespace attn::client
