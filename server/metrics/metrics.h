// Prometheus metrics of the server, vLLM-style names with the attn_ prefix
// and a `model` label, served as text at /metrics on the metrics port and
// the HTTP port (server/http/openai_service.h).
//
//   attn_requests_total{model,method,code,protocol} calls by status code, grpc or http
//   attn_request_success_total{model,finish_reason} finished generations
//   attn_prompt_tokens_total{model}                  prompt tokens prefilled
//   attn_generation_tokens_total{model}              tokens generated
//   attn_time_to_first_token_seconds{model,protocol} histogram
//   attn_inter_token_latency_seconds{model,protocol} histogram
//   attn_e2e_request_latency_seconds{model,protocol} histogram
//   attn_request_queue_time_seconds{model,protocol}  histogram
//   attn_num_requests_running{model}                 gauge (holding a state slot)
//   attn_num_requests_waiting{model}                 gauge
//   attn_batch_size{model}                           histogram, rows per decode step
//   attn_step_duration_seconds{model,phase}          histogram, phase prefill|decode
//   attn_state_memory_bytes{model}                   gauge, state of running sequences
//   attn_state_memory_capacity_bytes{model}          gauge, the most the slots may hold
//   attn_state_memory_usage_perc{model}              gauge, bytes / capacity (0 to 1)
//   attn_model_info{model,mixer,architecture,device,backend} gauge, always 1
//   attn_grammar_mask_seconds{model}                 histogram, a constrained step's mask
//   attn_grammar_requests_total{cache}               constrained requests: hit or miss
//   attn_grammar_compile_seconds                     histogram, compiling a constraint
//   attn_spec_decode_num_draft_tokens_total{model}   speculative decoding: drafted,
//   attn_spec_decode_num_accepted_tokens_total{model}  accepted (the model's own choices)
//   attn_spec_decode_num_rejected_tokens_total{model}  and rejected tokens
// and with a shared state tier (--state_store):
//   attn_state_store_lookups_total{outcome}           hit, miss, timeout, error
//   attn_state_store_hit_tokens_total                 prompt tokens hits covered
//   attn_state_store_lookup_seconds                   histogram
//   attn_state_store_verify_failures_total            entries that did not verify
//   attn_state_store_errors_total                     failed round trips
//   attn_state_store_written_bytes_total, attn_state_store_dropped_writes_total
//   attn_state_store_connected                        gauge
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/grammar/constraint.h"
#include "server/engine/engine.h"
#include "server/state/response_store.h"
#include "server/state/state_store.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace attn::serving {

struct ModelLabels {
  std::string model;
  std::string mixer;
  std::string architecture;
  std::string device;
  int64_t state_capacity_bytes = 0;
  std::string backend;            // "native" or "torchscript"
  int64_t state_cache_bytes = 0;  // the state cache's capacity; 0: off
  std::string weight_dtype;       // "float32", "int8", "bf16"; empty: not known
};

class Metrics {
 public:
  Metrics();
  ~Metrics();

  // The observer to give the model's engine; owned by this object.
  EngineObserver* AddModel(const ModelLabels& labels);
  // The shared state tier's observer (its metrics appear from now on);
  // owned by this object.
  StateStoreObserver* AddStateStore();
  // The Responses API's store's observer; owned by this object.
  ResponseStoreObserver* AddResponseStore();
  // Structured output's grammar cache's observer (GrammarCache::SetObserver);
  // owned by this object.
  grammar::GrammarCacheObserver* grammar_observer();
  // One finished call; `code` is the gRPC status code name ("OK", ...),
  // also for HTTP (StatusCodeName of the status behind the HTTP answer).
  void CountRequest(const std::string& model, const std::string& method, const std::string& code,
                    Protocol protocol = Protocol::kGrpc);
  // The exposition in the Prometheus text format.
  std::string Exposition() const;

 private:
  struct Families;
  class ModelObserver;
  class StoreObserver;
  class ResponsesObserver;
  class GrammarObserver;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Families> families_;
  std::vector<std::unique_ptr<ModelObserver>> observers_;
  std::unique_ptr<StoreObserver> store_;
  std::unique_ptr<ResponsesObserver> responses_;
  std::unique_ptr<GrammarObserver> grammar_;
};

// The gRPC name of an absl status code, "OK", "INVALID_ARGUMENT", ...
std::string StatusCodeName(absl::StatusCode code);

}  // namespace attn::serving
