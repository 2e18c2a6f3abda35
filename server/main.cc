// attn-server: serves model packages over gRPC (attn.v1.TextGeneration) and
// OpenAI's HTTP API with continuous batching, and Prometheus metrics.
//
// Every flag can also come from the environment as ATTN_<FLAG> (ATTN_PORT,
// ATTN_MODELS, ...); a command-line flag wins over the environment.
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "model/backend/backend_kind.h"
#include "server/server.h"
#include "util/cpus.h"
#include "util/flags.h"

namespace {

// Every default below comes from the options structs the server runs with,
// so a flag's help and the code cannot disagree.
const attn::serving::ServerOptions& Defaults() {
  static const auto* defaults = new attn::serving::ServerOptions();
  return *defaults;
}
const attn::serving::RegistryOptions& RegistryDefaults() { return Defaults().registry; }
const attn::serving::EngineOptions& EngineDefaults() { return Defaults().registry.engine; }
const attn::serving::RequestLimits& LimitDefaults() { return EngineDefaults().limits; }

}  // namespace

ABSL_FLAG(std::string, models, absl::StrJoin(RegistryDefaults().paths, ","),
          "Comma-separated model package files (*.pt) or directories of them.");
ABSL_FLAG(std::string, default_model, RegistryDefaults().default_model,
          "Model used when a request names none; empty: the first one loaded.");
ABSL_FLAG(std::string, initial_states, "",
          "Named initial states of rwkv7 models, comma-separated MODEL:NAME=FILE entries (FILE: "
          "a .pth of blocks.N.att.time_state, as RWKV state tuning writes); a request names one "
          "in initial_state.");
ABSL_FLAG(std::string, host, Defaults().host, "Address to listen on.");
ABSL_FLAG(int, port, Defaults().port, "gRPC port (0: any free port, printed at start).");
ABSL_FLAG(int, http_port, Defaults().http_port,
          "HTTP port of the OpenAI-compatible API, /health, /metrics and the chat page at / "
          "(0: any free port; -1: off). Same --host, API keys and TLS files as gRPC.");
ABSL_FLAG(int, metrics_port, Defaults().metrics_port,
          "Prometheus /metrics port (0: any; -1: off).");
ABSL_FLAG(std::string, metrics_host, Defaults().metrics_host,
          "Address of the metrics endpoint; empty: --host. 127.0.0.1 keeps it off the network.");
ABSL_FLAG(std::string, state_store, Defaults().state_store.url,
          "Shared state tier: redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]. Replicas read the "
          "longest stored prefix of a prompt the local cache misses and write states at "
          "prompts' ends and finished generations. Empty: none.");
ABSL_FLAG(absl::Duration, state_store_ttl, Defaults().state_store.ttl,
          "How long a state stays in the shared tier after it is written.");
ABSL_FLAG(absl::Duration, state_store_timeout, Defaults().state_store.timeout,
          "A shared-tier lookup's budget; past it the request prefills without it.");
ABSL_FLAG(absl::Duration, response_ttl, Defaults().responses.ttl,
          "How long a stored response of /v1/responses (store: true) stays retrievable and "
          "continuable by previous_response_id.");
ABSL_FLAG(int64_t, response_store_bytes, Defaults().responses.capacity_bytes,
          "Memory for stored responses in this process; past it the oldest go first (with "
          "--state_store they stay in Redis until --response_ttl).");
ABSL_FLAG(std::string, tls_cert, Defaults().tls.cert,
          "PEM certificate chain: serve gRPC and HTTP over TLS.");
ABSL_FLAG(std::string, tls_key, Defaults().tls.key, "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_client_ca, Defaults().tls.client_ca,
          "PEM CA certificates: require client certificates they signed (mutual TLS).");
ABSL_FLAG(int, tls_reload_seconds, Defaults().tls.reload_seconds,
          "How often the TLS files are re-read; renewed certificates serve new connections "
          "without a restart.");
ABSL_FLAG(std::string, api_keys_file, Defaults().api_keys_file,
          "File of API keys, one per line (or sha256:<hex digest>); clients send "
          "\"authorization: Bearer <key>\". Empty: no keys needed.");
ABSL_FLAG(int64_t, max_requests_per_key, Defaults().max_requests_per_key,
          "Generation and scoring calls one API key may have running at once; 0: no limit.");
ABSL_FLAG(bool, reflection, Defaults().reflection, "Serve gRPC server reflection.");
ABSL_FLAG(bool, skip_bad_models, RegistryDefaults().skip_bad_models,
          "Serve the models that load when some do not (each is named with its reason); "
          "false: any package that does not load stops the start.");
ABSL_FLAG(std::string, device, RegistryDefaults().device, "cpu, cuda or cuda:N.");
ABSL_FLAG(std::string, backend, attn::BackendKindName(RegistryDefaults().backend),
          "What runs the models: auto (native for this project's packages, TorchScript for any "
          "other module that keeps docs/model-contract.md), native or torchscript; for single "
          "models, comma-separated NAME=KIND entries (\"auto,gru=torchscript\").");
ABSL_FLAG(std::string, quantize, attn::serving::QuantizationName(RegistryDefaults().quantization),
          "Quantisation at load, native backend: none, int8 (the dense weights as int8 with a "
          "float scale per output channel, multiplied by activations rounded to int8 per row; "
          "decode steps read a quarter of the bytes) or bf16 (the dense weights and the "
          "activations rounded to bfloat16, sums float32; decode steps read half the bytes; on a "
          "GPU too, with LibTorch's bf16 product, whose outputs are bf16; int8 is CPU only); for "
          "single models, comma-separated NAME=none|int8|bf16 entries (\"none,big=int8\").");
ABSL_FLAG(std::string, chat_template, "",
          "A Jinja chat template file every model renders chats with, instead of the one its "
          "package records (attn-export takes it from the model's files); empty: each package's.");
ABSL_FLAG(int, threads, 0, "Intra-op threads; 0: the CPUs this process may use (cgroup quota).");
ABSL_FLAG(std::string, engine_cpus, "",
          "CPUs for the engines' threads, as taskset writes them (\"1\", \"2-7\"); the gRPC, "
          "HTTP and delivery threads then run on the other CPUs this process may use. Empty: all "
          "threads anywhere. --threads defaults to the number listed.");
ABSL_FLAG(int64_t, max_active, EngineDefaults().max_active,
          "Sequences running at once per model (state slots).");
ABSL_FLAG(int64_t, max_waiting, EngineDefaults().max_waiting,
          "Requests queued per model beyond the running ones; more get RESOURCE_EXHAUSTED.");
ABSL_FLAG(int64_t, max_state_bytes, EngineDefaults().max_state_bytes,
          "State memory per model that running requests may hold; each reserves its state at "
          "its longest context (prompt plus max_tokens) and waits for room. 0: --max_active "
          "rows at the model's longest context.");
ABSL_FLAG(int64_t, max_exported_state_bytes, EngineDefaults().max_exported_state_bytes,
          "Largest state that leaves the process: returned to a client (return_state) or "
          "written to --state_store. A hybrid's state holds its attention layers' key/value "
          "prefix, which grows with the context: a return_state request whose state could "
          "exceed it is refused, and larger states stay local. 0: no bound.");
ABSL_FLAG(int64_t, max_prompt_tokens, LimitDefaults().max_prompt_tokens,
          "Longest prompt (and scored text) in tokens.");
ABSL_FLAG(int64_t, max_tokens, LimitDefaults().max_tokens,
          "Largest max_tokens a request may ask for.");
ABSL_FLAG(int64_t, default_max_tokens, LimitDefaults().default_max_tokens,
          "max_tokens when a request leaves it unset.");
ABSL_FLAG(int64_t, prefill_chunk, 0,
          "Prompt tokens prefilled per engine iteration: bounds how long a prompt delays "
          "running streams. 0: 256 on a CPU, 2048 on a GPU.");
ABSL_FLAG(int64_t, max_decode_rows, EngineDefaults().max_decode_rows,
          "Sequences decoded together per engine iteration; when more are ready, those with "
          "the fewest generated tokens go first.");
ABSL_FLAG(int64_t, stream_buffer, EngineDefaults().stream_buffer,
          "Messages queued per stream for a slow reader before its sequence pauses.");
ABSL_FLAG(int64_t, stream_interval, EngineDefaults().stream_interval,
          "Tokens per streamed message after the first (which goes out at once): 1 streams "
          "every token; more send fewer messages, trading smoothness for throughput.");
ABSL_FLAG(std::string, speculative, attn::serving::SpeculationName(EngineDefaults().speculative),
          "Speculative decoding: off, or ngram (a stream in a decode batch of at most "
          "--speculative_max_batch drafts tokens by finding its last few tokens earlier in its "
          "prompt and output, and the batch checks them in one pass; the output is unchanged).");
ABSL_FLAG(int64_t, draft_tokens, EngineDefaults().draft_tokens,
          "The most tokens one speculative round drafts (at most 32).");
ABSL_FLAG(int64_t, speculative_max_batch, EngineDefaults().speculative_max_batch,
          "The largest decode batch whose streams draft; each stream's rounds are judged "
          "against the measured plain step at that batch size and pause while they do not pay.");
ABSL_FLAG(std::string, draft_model, RegistryDefaults().draft_model,
          "A model of --models, by name, that drafts for the others with its vocabulary: it "
          "decodes --draft_tokens tokens greedily ahead of a stream decoding alone (after "
          "n-gram lookup, with --speculative=ngram), checked in one pass; the output is "
          "unchanged. Served as itself too.");
ABSL_FLAG(double, draft_prefill_share, EngineDefaults().draft_prefill_share,
          "The most of a stream's plain decoding time (its max_tokens steps) the draft model may "
          "spend reading its prompt before its drafts can show they pay; a stream whose prompt "
          "would take longer decodes without it (0-100).");
ABSL_FLAG(std::string, state_cache, attn::serving::StateCacheName(RegistryDefaults().state_cache),
          "Which models keep a state cache, so that a prompt that starts with tokens seen "
          "before prefills only the rest: recurrent (models whose state does not grow with the "
          "context), all (key/value caches too: an entry costs its context), or off.");
ABSL_FLAG(int64_t, state_cache_bytes, EngineDefaults().state_cache_bytes,
          "Bytes of cached states per model (least recently used out first); 0: no cache.");
ABSL_FLAG(int64_t, state_cache_interval, EngineDefaults().state_cache_interval,
          "A long prompt leaves a cached state every this many tokens, so that a shared "
          "beginning (a system prompt) is reused whatever follows it.");
ABSL_FLAG(int, http_timeout_seconds,
          static_cast<int>(absl::ToInt64Seconds(Defaults().http_timeout)),
          "How long an HTTP request may take before it ends with 504; a client's shorter "
          "X-Stainless-Timeout (OpenAI's SDKs send one) wins. 0: no limit.");
ABSL_FLAG(int, shutdown_grace_seconds,
          static_cast<int>(absl::ToInt64Seconds(Defaults().shutdown_grace)),
          "On SIGTERM/SIGINT, how long running requests may take to finish.");

namespace {

// ATTN_<FLAG> environment variables become flag values before the command
// line is parsed, so the command line wins.
void ApplyEnvironment() {
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!attn::IsFlagOfFile(*flag, __FILE__)) continue;
    const std::string variable = absl::StrCat("ATTN_", absl::AsciiStrToUpper(name));
    const char* value = std::getenv(variable.c_str());
    if (value == nullptr) continue;
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      std::fprintf(stderr, "error: %s=%s: %s\n", variable.c_str(), value, error.c_str());
      std::exit(2);
    }
  }
}

// A flag that does not parse is a startup error.
void ExitIfBad(const absl::Status& parsed) {
  if (parsed.ok()) return;
  std::fprintf(stderr, "error: %s\n", std::string(parsed.message()).c_str());
  std::exit(2);
}

attn::serving::ServerOptions OptionsFromFlags() {
  attn::serving::ServerOptions options;
  options.host = absl::GetFlag(FLAGS_host);
  options.port = absl::GetFlag(FLAGS_port);
  options.http_port = absl::GetFlag(FLAGS_http_port);
  options.state_store.url = absl::GetFlag(FLAGS_state_store);
  options.state_store.ttl = absl::GetFlag(FLAGS_state_store_ttl);
  options.state_store.timeout = absl::GetFlag(FLAGS_state_store_timeout);
  options.responses.ttl = absl::GetFlag(FLAGS_response_ttl);
  options.responses.capacity_bytes = absl::GetFlag(FLAGS_response_store_bytes);
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  options.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  options.tls.cert = absl::GetFlag(FLAGS_tls_cert);
  options.tls.key = absl::GetFlag(FLAGS_tls_key);
  options.tls.client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  options.tls.reload_seconds = absl::GetFlag(FLAGS_tls_reload_seconds);
  options.api_keys_file = absl::GetFlag(FLAGS_api_keys_file);
  options.max_requests_per_key = absl::GetFlag(FLAGS_max_requests_per_key);
  options.reflection = absl::GetFlag(FLAGS_reflection);
  options.registry.skip_bad_models = absl::GetFlag(FLAGS_skip_bad_models);
  options.registry.paths = absl::StrSplit(absl::GetFlag(FLAGS_models), ',', absl::SkipWhitespace());
  options.registry.default_model = absl::GetFlag(FLAGS_default_model);
  options.registry.draft_model = absl::GetFlag(FLAGS_draft_model);
  options.registry.device = absl::GetFlag(FLAGS_device);
  options.registry.chat_template = absl::GetFlag(FLAGS_chat_template);
  ExitIfBad(attn::serving::ParseBackendFlag(absl::GetFlag(FLAGS_backend), &options.registry));
  ExitIfBad(attn::serving::ParseQuantizeFlag(absl::GetFlag(FLAGS_quantize), &options.registry));
  attn::serving::EngineOptions& engine = options.registry.engine;
  engine.max_active = absl::GetFlag(FLAGS_max_active);
  engine.max_waiting = absl::GetFlag(FLAGS_max_waiting);
  engine.max_state_bytes = absl::GetFlag(FLAGS_max_state_bytes);
  engine.max_exported_state_bytes = absl::GetFlag(FLAGS_max_exported_state_bytes);
  engine.limits.max_prompt_tokens = absl::GetFlag(FLAGS_max_prompt_tokens);
  engine.limits.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  engine.limits.default_max_tokens = absl::GetFlag(FLAGS_default_max_tokens);
  engine.prefill_chunk =
      attn::serving::PrefillChunkFor(absl::GetFlag(FLAGS_prefill_chunk), options.registry.device);
  engine.max_decode_rows = absl::GetFlag(FLAGS_max_decode_rows);
  engine.stream_buffer = absl::GetFlag(FLAGS_stream_buffer);
  engine.stream_interval = absl::GetFlag(FLAGS_stream_interval);
  engine.draft_tokens = absl::GetFlag(FLAGS_draft_tokens);
  engine.speculative_max_batch = absl::GetFlag(FLAGS_speculative_max_batch);
  engine.draft_prefill_share = absl::GetFlag(FLAGS_draft_prefill_share);
  ExitIfBad(attn::serving::ParseSpeculation(absl::GetFlag(FLAGS_speculative), &engine.speculative));
  engine.state_cache_bytes = absl::GetFlag(FLAGS_state_cache_bytes);
  engine.state_cache_interval = absl::GetFlag(FLAGS_state_cache_interval);
  ExitIfBad(attn::serving::ParseInitialStatesFlag(absl::GetFlag(FLAGS_initial_states),
                                                  &options.registry.initial_states));
  ExitIfBad(
      attn::serving::ParseStateCacheFlag(absl::GetFlag(FLAGS_state_cache), &options.registry));
  options.shutdown_grace = absl::Seconds(absl::GetFlag(FLAGS_shutdown_grace_seconds));
  const int http_timeout = absl::GetFlag(FLAGS_http_timeout_seconds);
  if (http_timeout < 0) {
    std::fprintf(stderr, "error: --http_timeout_seconds: must be 0 (no limit) or more, got %d\n",
                 http_timeout);
    std::exit(2);
  }
  options.http_timeout = http_timeout == 0 ? absl::InfiniteDuration() : absl::Seconds(http_timeout);
  return options;
}

// A bound out of range is a startup error naming the flag.
bool CheckBounds(const attn::serving::ServerOptions& options) {
  const absl::Status valid = options.registry.engine.Validate();
  if (!valid.ok()) std::fprintf(stderr, "error: --%s\n", std::string(valid.message()).c_str());
  return valid.ok();
}

// --engine_cpus: the engines get those CPUs (their threads pin themselves
// when they start), and this thread, whose mask every gRPC and delivery
// thread started later inherits, gets the rest. Returns false after printing
// an error naming the flag.
bool PlaceThreads(attn::serving::ServerOptions& options) {
  const std::string list = absl::GetFlag(FLAGS_engine_cpus);
  if (list.empty()) return true;
  const auto cpus = attn::ParseCpuList(list);
  if (!cpus.ok()) {
    std::fprintf(stderr, "error: --engine_cpus=%s: %s\n", list.c_str(),
                 std::string(cpus.status().message()).c_str());
    return false;
  }
  const std::vector<int> allowed = attn::AllowedCpus();
  if (!std::includes(allowed.begin(), allowed.end(), cpus->begin(), cpus->end())) {
    std::fprintf(stderr,
                 "error: --engine_cpus=%s: lists CPUs this process may not use; it may use %s\n",
                 list.c_str(), attn::FormatCpuList(allowed).c_str());
    return false;
  }
  std::vector<int> rest;
  std::set_difference(allowed.begin(), allowed.end(), cpus->begin(), cpus->end(),
                      std::back_inserter(rest));
  // With every CPU given to the engines, the serving threads share them.
  const absl::Status pinned = rest.empty() ? absl::OkStatus() : attn::PinCallingThread(rest);
  if (!pinned.ok()) {
    std::fprintf(stderr, "error: --engine_cpus=%s: %s\n", list.c_str(),
                 std::string(pinned.message()).c_str());
    return false;
  }
  options.registry.engine.cpus = *cpus;
  std::printf("engine threads on CPUs %s, serving threads on CPUs %s\n",
              attn::FormatCpuList(*cpus).c_str(),
              attn::FormatCpuList(rest.empty() ? allowed : rest).c_str());
  return true;
}

// Every HTTP connection holds a descriptor; the usual soft limit of 1024
// would refuse clients long before memory or threads run short.
void RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    std::fprintf(stderr, "warning: cannot raise the open-file limit; HTTP clients are capped\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Serves language-model packages over gRPC and OpenAI's HTTP API.\n  attn-server "
      "--models=models --port=50051 --http_port=8000 --metrics_port=9090");
  attn::ListFlagsOfFolderInHelp(__FILE__);
  ApplyEnvironment();
  absl::ParseCommandLine(argc, argv);
  attn::serving::ServerOptions options = OptionsFromFlags();
  if (!CheckBounds(options) || !PlaceThreads(options)) return 2;

  // Signals are taken by sigwait below; every thread started from here on
  // inherits the blocked mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  RaiseOpenFileLimit();
  if (!attn::KeepFreedMemoryForReuse()) {
    std::fprintf(stderr, "warning: the C allocator kept its defaults; prefills may run slower\n");
  }
  const auto engine_cpus = static_cast<int>(options.registry.engine.cpus.size());
  const int threads = attn::ConfigureThreads(
      absl::GetFlag(FLAGS_threads) > 0 ? absl::GetFlag(FLAGS_threads) : engine_cpus);
  options.registry.progress = [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  auto server = attn::serving::InferenceServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  attn::ReturnFreedMemory();
  for (const auto& model : (*server)->registry().models()) {
    const auto& d = model->description;
    const std::string weights =
        d.weight_dtype.empty() || d.weight_dtype == "float32" ? "" : d.weight_dtype + " weights, ";
    std::printf(
        "model %s: %s, %ld parameters, %s%ld state bytes per sequence, %s%s, warmed up in %.0f "
        "ms\n",
        d.name.c_str(), d.mixer.c_str(), static_cast<long>(d.parameters), weights.c_str(),
        static_cast<long>(d.state_bytes_per_sequence), d.device.c_str(),
        d.name == (*server)->registry().default_model() ? " (default)" : "",
        absl::ToDoubleMilliseconds(model->engine->warm_up().time));
  }
  std::printf("serving attn.v1.TextGeneration on %s:%d (%d intra-op threads)\n",
              options.host.c_str(), (*server)->port(), threads);
  if ((*server)->http_port() >= 0) {
    std::printf("serving the OpenAI API on %s://%s:%d/v1 (chat page at /)\n",
                options.tls.enabled() ? "https" : "http", options.host.c_str(),
                (*server)->http_port());
  }
  if (options.metrics_port >= 0) {
    const std::string& host = options.metrics_host.empty() ? options.host : options.metrics_host;
    std::printf("metrics on http://%s:%d/metrics\n", host.c_str(), (*server)->metrics_port());
  }
  std::fflush(stdout);

  int received = 0;
  sigwait(&signals, &received);
  std::printf("received %s: draining (grace %d s)\n", received == SIGTERM ? "SIGTERM" : "SIGINT",
              absl::GetFlag(FLAGS_shutdown_grace_seconds));
  std::fflush(stdout);
  (*server)->Shutdown();
  std::printf("stopped\n");
  return 0;
}
