#include "server/metrics/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <map>

#include "absl/strings/str_cat.h"

namespace attn::serving {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

const Histogram::BucketBoundaries& LatencyBuckets() {
  static const Histogram::BucketBoundaries buckets{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                   0.05,   0.1,   0.25,   0.5,   1,    2.5,
                                                   5,      10,    30,     60,    120,  300};
  return buckets;
}

}  // namespace

std::string StatusCodeName(absl::StatusCode code) {
  return code == absl::StatusCode::kOk ? "OK" : absl::StatusCodeToString(code);
}

struct Metrics::Families {
  explicit Families(prometheus::Registry& r)
      : requests(
            BuildCounter()
                .Name("attn_requests_total")
                .Help("Requests finished, by method, gRPC status code and protocol (grpc or http).")
                .Register(r)),
        success(BuildCounter()
                    .Name("attn_request_success_total")
                    .Help("Generations finished, by finish reason.")
                    .Register(r)),
        prompt_tokens(BuildCounter()
                          .Name("attn_prompt_tokens_total")
                          .Help("Prompt tokens prefilled (generation and scoring).")
                          .Register(r)),
        generation_tokens(BuildCounter()
                              .Name("attn_generation_tokens_total")
                              .Help("Tokens generated.")
                              .Register(r)),
        ttft(BuildHistogram()
                 .Name("attn_time_to_first_token_seconds")
                 .Help("Time from arrival to the first generated token.")
                 .Register(r)),
        inter_token(BuildHistogram()
                        .Name("attn_inter_token_latency_seconds")
                        .Help("Time between consecutive tokens of a sequence.")
                        .Register(r)),
        e2e(BuildHistogram()
                .Name("attn_e2e_request_latency_seconds")
                .Help("Time from arrival to the last event of a request.")
                .Register(r)),
        queue(BuildHistogram()
                  .Name("attn_request_queue_time_seconds")
                  .Help("Time a request waited for a state slot.")
                  .Register(r)),
        running(BuildGauge()
                    .Name("attn_num_requests_running")
                    .Help("Requests holding a state slot.")
                    .Register(r)),
        waiting(BuildGauge()
                    .Name("attn_num_requests_waiting")
                    .Help("Requests queued for a state slot.")
                    .Register(r)),
        batch_size(BuildHistogram()
                       .Name("attn_batch_size")
                       .Help("Sequences stepped together per decode step.")
                       .Register(r)),
        step_duration(BuildHistogram()
                          .Name("attn_step_duration_seconds")
                          .Help("Duration of an engine step, by phase (prefill or decode).")
                          .Register(r)),
        state_memory(BuildGauge()
                         .Name("attn_state_memory_bytes")
                         .Help("Recurrent state (or cache) bytes held by running sequences.")
                         .Register(r)),
        state_capacity(BuildGauge()
                           .Name("attn_state_memory_capacity_bytes")
                           .Help("State bytes preallocated for all slots.")
                           .Register(r)),
        state_usage(BuildGauge()
                        .Name("attn_state_memory_usage_perc")
                        .Help("State memory of running sequences as a fraction (0 to 1) of its "
                              "capacity: the analogue of a KV-cache usage for load balancers.")
                        .Register(r)),
        cache_hits(BuildCounter()
                       .Name("attn_state_cache_hits_total")
                       .Help("Generation requests that started from a cached state.")
                       .Register(r)),
        cache_misses(BuildCounter()
                         .Name("attn_state_cache_misses_total")
                         .Help("Generation requests the state cache had nothing for.")
                         .Register(r)),
        cache_tokens_saved(BuildCounter()
                               .Name("attn_state_cache_tokens_saved_total")
                               .Help("Prompt tokens not prefilled thanks to the state cache.")
                               .Register(r)),
        cache_entries(BuildGauge()
                          .Name("attn_state_cache_entries")
                          .Help("States held by the state cache.")
                          .Register(r)),
        cache_bytes(BuildGauge()
                        .Name("attn_state_cache_bytes")
                        .Help("Bytes held by the state cache (states, logits, tokens).")
                        .Register(r)),
        cache_capacity(BuildGauge()
                           .Name("attn_state_cache_capacity_bytes")
                           .Help("Bytes the state cache may hold; 0: off for the model.")
                           .Register(r)),
        grammar_mask(BuildHistogram()
                         .Name("attn_grammar_mask_seconds")
                         .Help("Time a constrained sequence's step spent on its grammar's mask "
                               "of allowed tokens (structured output).")
                         .Register(r)),
        spec_draft(BuildCounter()
                       .Name("attn_spec_decode_num_draft_tokens_total")
                       .Help("Tokens drafted by speculative decoding (--speculative).")
                       .Register(r)),
        spec_accepted(BuildCounter()
                          .Name("attn_spec_decode_num_accepted_tokens_total")
                          .Help("Drafted tokens that were the model's own choices.")
                          .Register(r)),
        spec_rejected(BuildCounter()
                          .Name("attn_spec_decode_num_rejected_tokens_total")
                          .Help("Drafted tokens thrown away, the state rolled back past them.")
                          .Register(r)),
        info(BuildGauge()
                 .Name("attn_model_info")
                 .Help("A hosted model; the value is always 1.")
                 .Register(r)) {}

  prometheus::Family<prometheus::Counter>& requests;
  prometheus::Family<prometheus::Counter>& success;
  prometheus::Family<prometheus::Counter>& prompt_tokens;
  prometheus::Family<prometheus::Counter>& generation_tokens;
  prometheus::Family<Histogram>& ttft;
  prometheus::Family<Histogram>& inter_token;
  prometheus::Family<Histogram>& e2e;
  prometheus::Family<Histogram>& queue;
  prometheus::Family<prometheus::Gauge>& running;
  prometheus::Family<prometheus::Gauge>& waiting;
  prometheus::Family<Histogram>& batch_size;
  prometheus::Family<Histogram>& step_duration;
  prometheus::Family<prometheus::Gauge>& state_memory;
  prometheus::Family<prometheus::Gauge>& state_capacity;
  prometheus::Family<prometheus::Gauge>& state_usage;
  prometheus::Family<prometheus::Counter>& cache_hits;
  prometheus::Family<prometheus::Counter>& cache_misses;
  prometheus::Family<prometheus::Counter>& cache_tokens_saved;
  prometheus::Family<prometheus::Gauge>& cache_entries;
  prometheus::Family<prometheus::Gauge>& cache_bytes;
  prometheus::Family<prometheus::Gauge>& cache_capacity;
  prometheus::Family<Histogram>& grammar_mask;
  prometheus::Family<prometheus::Counter>& spec_draft;
  prometheus::Family<prometheus::Counter>& spec_accepted;
  prometheus::Family<prometheus::Counter>& spec_rejected;
  prometheus::Family<prometheus::Gauge>& info;
};

const Histogram::BucketBoundaries& GrammarBuckets() {
  static const Histogram::BucketBoundaries buckets{0.00001, 0.00005, 0.0001, 0.00025, 0.0005, 0.001,
                                                   0.0025,  0.005,   0.01,   0.05,    0.1,    0.5};
  return buckets;
}

class Metrics::ModelObserver : public EngineObserver {
 public:
  ModelObserver(Families& f, const ModelLabels& labels)
      : families_(f),
        model_(labels.model),
        prompt_tokens_(f.prompt_tokens.Add({{"model", model_}})),
        generation_tokens_(f.generation_tokens.Add({{"model", model_}})),
        latency_{ProtocolLatencies(f, model_, Protocol::kGrpc),
                 ProtocolLatencies(f, model_, Protocol::kHttp)},
        running_(f.running.Add({{"model", model_}})),
        waiting_(f.waiting.Add({{"model", model_}})),
        batch_size_(f.batch_size.Add(
            {{"model", model_}},
            Histogram::BucketBoundaries{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096})),
        prefill_(f.step_duration.Add({{"model", model_}, {"phase", "prefill"}}, LatencyBuckets())),
        decode_(f.step_duration.Add({{"model", model_}, {"phase", "decode"}}, LatencyBuckets())),
        state_memory_(f.state_memory.Add({{"model", model_}})),
        state_usage_(f.state_usage.Add({{"model", model_}})),
        state_capacity_bytes_(labels.state_capacity_bytes),
        cache_hits_(f.cache_hits.Add({{"model", model_}})),
        cache_misses_(f.cache_misses.Add({{"model", model_}})),
        cache_tokens_saved_(f.cache_tokens_saved.Add({{"model", model_}})),
        cache_entries_(f.cache_entries.Add({{"model", model_}})),
        cache_bytes_(f.cache_bytes.Add({{"model", model_}})),
        grammar_mask_(f.grammar_mask.Add({{"model", model_}}, GrammarBuckets())),
        spec_draft_(f.spec_draft.Add({{"model", model_}})),
        spec_accepted_(f.spec_accepted.Add({{"model", model_}})),
        spec_rejected_(f.spec_rejected.Add({{"model", model_}})) {
    f.cache_capacity.Add({{"model", model_}}).Set(static_cast<double>(labels.state_cache_bytes));
    f.state_capacity.Add({{"model", model_}}).Set(static_cast<double>(labels.state_capacity_bytes));
    f.info
        .Add({{"model", model_},
              {"mixer", labels.mixer},
              {"architecture", labels.architecture},
              {"device", labels.device},
              {"backend", labels.backend},
              {"weight_dtype", labels.weight_dtype}})
        .Set(1);
    // Every finish reason from the start, so rate() sees the first one.
    for (const char* reason : {"length", "stop", "eos"}) {
      f.success.Add({{"model", model_}, {"finish_reason", reason}});
    }
  }

  void OnAdmitted(Protocol protocol, absl::Duration queue_time) override {
    Of(protocol).queue.Observe(Seconds(queue_time));
  }
  void OnFirstToken(Protocol protocol, absl::Duration since_arrival) override {
    Of(protocol).ttft.Observe(Seconds(since_arrival));
    generation_tokens_.Increment();
  }
  void OnNextToken(Protocol protocol, absl::Duration since_previous) override {
    Of(protocol).inter_token.Observe(Seconds(since_previous));
    generation_tokens_.Increment();
  }
  void OnFinished(Protocol protocol, const StreamEvent& last,
                  absl::Duration since_arrival) override {
    Of(protocol).e2e.Observe(Seconds(since_arrival));
    if (last.status.ok() && last.finish_reason != FinishReason::kUnspecified) {
      families_.success
          .Add({{"model", model_}, {"finish_reason", FinishReasonName(last.finish_reason)}})
          .Increment();
    }
  }
  void OnStep(Phase phase, absl::Duration took, int64_t rows, int64_t tokens) override {
    if (phase == Phase::kPrefill) {
      prefill_.Observe(Seconds(took));
      prompt_tokens_.Increment(static_cast<double>(tokens));
    } else {
      decode_.Observe(Seconds(took));
      batch_size_.Observe(static_cast<double>(rows));
    }
  }
  void OnLoad(int64_t running, int64_t waiting, int64_t state_bytes) override {
    running_.Set(static_cast<double>(running));
    waiting_.Set(static_cast<double>(waiting));
    state_memory_.Set(static_cast<double>(state_bytes));
    state_usage_.Set(state_capacity_bytes_ > 0 ? static_cast<double>(state_bytes) /
                                                     static_cast<double>(state_capacity_bytes_)
                                               : 0.0);
  }
  void OnCacheLookup(int64_t reused, int64_t /*prompt*/) override {
    if (reused == 0) {
      cache_misses_.Increment();
      return;
    }
    cache_hits_.Increment();
    cache_tokens_saved_.Increment(static_cast<double>(reused));
  }
  void OnCacheSize(int64_t entries, int64_t bytes) override {
    cache_entries_.Set(static_cast<double>(entries));
    cache_bytes_.Set(static_cast<double>(bytes));
  }
  void OnGrammarMask(absl::Duration took) override { grammar_mask_.Observe(Seconds(took)); }
  void OnSpeculation(int64_t drafted, int64_t accepted) override {
    spec_draft_.Increment(static_cast<double>(drafted));
    spec_accepted_.Increment(static_cast<double>(accepted));
    spec_rejected_.Increment(static_cast<double>(drafted - accepted));
  }

 private:
  // The latency histograms of one protocol.
  struct Latencies {
    Histogram& ttft;
    Histogram& inter_token;
    Histogram& e2e;
    Histogram& queue;
  };
  static Latencies ProtocolLatencies(Families& f, const std::string& model, Protocol protocol) {
    const std::map<std::string, std::string> labels = {{"model", model},
                                                       {"protocol", ProtocolName(protocol)}};
    return {f.ttft.Add(labels, LatencyBuckets()), f.inter_token.Add(labels, LatencyBuckets()),
            f.e2e.Add(labels, LatencyBuckets()), f.queue.Add(labels, LatencyBuckets())};
  }
  Latencies& Of(Protocol protocol) { return latency_[protocol == Protocol::kHttp ? 1 : 0]; }

  Families& families_;
  std::string model_;
  prometheus::Counter& prompt_tokens_;
  prometheus::Counter& generation_tokens_;
  Latencies latency_[2];  // grpc, http
  prometheus::Gauge& running_;
  prometheus::Gauge& waiting_;
  Histogram& batch_size_;
  Histogram& prefill_;
  Histogram& decode_;
  prometheus::Gauge& state_memory_;
  prometheus::Gauge& state_usage_;
  const int64_t state_capacity_bytes_;
  prometheus::Counter& cache_hits_;
  prometheus::Counter& cache_misses_;
  prometheus::Counter& cache_tokens_saved_;
  prometheus::Gauge& cache_entries_;
  prometheus::Gauge& cache_bytes_;
  Histogram& grammar_mask_;
  prometheus::Counter& spec_draft_;
  prometheus::Counter& spec_accepted_;
  prometheus::Counter& spec_rejected_;
};

// Structured output's compiled grammars (model/grammar/constraint.h).
class Metrics::GrammarObserver : public grammar::GrammarCacheObserver {
 public:
  explicit GrammarObserver(prometheus::Registry& r)
      : gets_(BuildCounter()
                  .Name("attn_grammar_requests_total")
                  .Help("Requests with a structured-output constraint, by whether its grammar "
                        "came from the cache (hit) or was compiled (miss).")
                  .Register(r)),
        hit_(gets_.Add({{"cache", "hit"}})),
        miss_(gets_.Add({{"cache", "miss"}})),
        compile_(BuildHistogram()
                     .Name("attn_grammar_compile_seconds")
                     .Help("Time compiling a constraint (JSON Schema, regex, choice, GBNF) "
                           "into a grammar took.")
                     .Register(r)
                     .Add({}, GrammarBuckets())) {}

  void OnGet(const grammar::CompileInfo& info) override {
    if (info.cached) {
      hit_.Increment();
      return;
    }
    miss_.Increment();
    compile_.Observe(info.seconds);
  }

 private:
  prometheus::Family<prometheus::Counter>& gets_;
  prometheus::Counter& hit_;
  prometheus::Counter& miss_;
  Histogram& compile_;
};

// The shared state tier's metrics (server/state/state_store.h).
class Metrics::StoreObserver : public StateStoreObserver {
 public:
  explicit StoreObserver(prometheus::Registry& r)
      : lookups_(BuildCounter()
                     .Name("attn_state_store_lookups_total")
                     .Help("Lookups in the shared state tier by outcome: hit, miss, timeout "
                           "(past --state_store_timeout) or error.")
                     .Register(r)),
        hit_(lookups_.Add({{"outcome", "hit"}})),
        miss_(lookups_.Add({{"outcome", "miss"}})),
        timeout_(lookups_.Add({{"outcome", "timeout"}})),
        error_(lookups_.Add({{"outcome", "error"}})),
        hit_tokens_(BuildCounter()
                        .Name("attn_state_store_hit_tokens_total")
                        .Help("Prompt tokens the shared state tier's hits covered.")
                        .Register(r)
                        .Add({})),
        latency_(BuildHistogram()
                     .Name("attn_state_store_lookup_seconds")
                     .Help("Time a lookup in the shared state tier took.")
                     .Register(r)
                     .Add({}, LatencyBuckets())),
        verify_failures_(BuildCounter()
                             .Name("attn_state_store_verify_failures_total")
                             .Help("Stored states that did not verify (tokens, fingerprint, "
                                   "checksum): served as misses.")
                             .Register(r)
                             .Add({})),
        errors_(BuildCounter()
                    .Name("attn_state_store_errors_total")
                    .Help("Failed round trips to the shared state tier.")
                    .Register(r)
                    .Add({})),
        written_bytes_(BuildCounter()
                           .Name("attn_state_store_written_bytes_total")
                           .Help("Bytes of states written to the shared state tier.")
                           .Register(r)
                           .Add({})),
        dropped_writes_(BuildCounter()
                            .Name("attn_state_store_dropped_writes_total")
                            .Help("States not written: the write queue was full.")
                            .Register(r)
                            .Add({})),
        connected_(BuildGauge()
                       .Name("attn_state_store_connected")
                       .Help("1 while the last round trip to the shared state tier succeeded.")
                       .Register(r)
                       .Add({})) {}

  void OnLookup(Outcome outcome, absl::Duration took, int64_t tokens) override {
    switch (outcome) {
      case Outcome::kHit:
        hit_.Increment();
        hit_tokens_.Increment(static_cast<double>(tokens));
        break;
      case Outcome::kMiss:
        miss_.Increment();
        break;
      case Outcome::kTimeout:
        timeout_.Increment();
        break;
      case Outcome::kError:
        error_.Increment();
        break;
    }
    latency_.Observe(Seconds(took));
  }
  void OnVerifyFailure() override { verify_failures_.Increment(); }
  void OnError() override { errors_.Increment(); }
  void OnWrite(int64_t /*entries*/, int64_t bytes) override {
    written_bytes_.Increment(static_cast<double>(bytes));
  }
  void OnDroppedWrite() override { dropped_writes_.Increment(); }
  void OnConnected(bool connected) override { connected_.Set(connected ? 1 : 0); }

 private:
  prometheus::Family<prometheus::Counter>& lookups_;
  prometheus::Counter& hit_;
  prometheus::Counter& miss_;
  prometheus::Counter& timeout_;
  prometheus::Counter& error_;
  prometheus::Counter& hit_tokens_;
  Histogram& latency_;
  prometheus::Counter& verify_failures_;
  prometheus::Counter& errors_;
  prometheus::Counter& written_bytes_;
  prometheus::Counter& dropped_writes_;
  prometheus::Gauge& connected_;
};

class Metrics::ResponsesObserver : public ResponseStoreObserver {
 public:
  explicit ResponsesObserver(prometheus::Registry& r)
      : stored_(BuildGauge()
                    .Name("attn_responses_stored")
                    .Help("Responses of /v1/responses this process keeps (store: true), until "
                          "--response_ttl.")
                    .Register(r)
                    .Add({})),
        stored_bytes_(BuildGauge()
                          .Name("attn_responses_stored_bytes")
                          .Help("Bytes of the stored responses (--response_store_bytes).")
                          .Register(r)
                          .Add({})),
        removed_(BuildCounter()
                     .Name("attn_responses_removed_total")
                     .Help("Stored responses removed: expired (--response_ttl), evicted "
                           "(--response_store_bytes) or deleted (DELETE /v1/responses/{id}).")
                     .Register(r)),
        expired_(removed_.Add({{"reason", "expired"}})),
        evicted_(removed_.Add({{"reason", "evicted"}})),
        deleted_(removed_.Add({{"reason", "deleted"}})),
        redis_errors_(BuildCounter()
                          .Name("attn_responses_redis_errors_total")
                          .Help("Failed or dropped Redis operations of the response store.")
                          .Register(r)
                          .Add({})) {}

  void OnSize(int64_t records, int64_t bytes) override {
    stored_.Set(static_cast<double>(records));
    stored_bytes_.Set(static_cast<double>(bytes));
  }
  void OnRemoved(Removal why, int64_t records) override {
    prometheus::Counter& counter = why == Removal::kExpired   ? expired_
                                   : why == Removal::kEvicted ? evicted_
                                                              : deleted_;
    counter.Increment(static_cast<double>(records));
  }
  void OnRedisError() override { redis_errors_.Increment(); }

 private:
  prometheus::Gauge& stored_;
  prometheus::Gauge& stored_bytes_;
  prometheus::Family<prometheus::Counter>& removed_;
  prometheus::Counter& expired_;
  prometheus::Counter& evicted_;
  prometheus::Counter& deleted_;
  prometheus::Counter& redis_errors_;
};

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      families_(std::make_unique<Families>(*registry_)),
      grammar_(std::make_unique<GrammarObserver>(*registry_)) {}

Metrics::~Metrics() = default;

EngineObserver* Metrics::AddModel(const ModelLabels& labels) {
  observers_.push_back(std::make_unique<ModelObserver>(*families_, labels));
  return observers_.back().get();
}

StateStoreObserver* Metrics::AddStateStore() {
  if (!store_) store_ = std::make_unique<StoreObserver>(*registry_);
  return store_.get();
}

grammar::GrammarCacheObserver* Metrics::grammar_observer() { return grammar_.get(); }

ResponseStoreObserver* Metrics::AddResponseStore() {
  if (!responses_) responses_ = std::make_unique<ResponsesObserver>(*registry_);
  return responses_.get();
}

void Metrics::CountRequest(const std::string& model, const std::string& method,
                           const std::string& code, Protocol protocol) {
  families_->requests
      .Add({{"model", model},
            {"method", method},
            {"code", code},
            {"protocol", ProtocolName(protocol)}})
      .Increment();
}

std::string Metrics::Exposition() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace attn::serving
