// attn-engine-bench: the engine's own speed, in process (no gRPC), on a model
// package. Every comparison is timed in one interleaved loop, because this
// machine's speed drifts between runs.
//
//   throughput     generated tokens/s with `concurrency` greedy requests kept
//                  in flight (closed loop), as attnctl bench measures over gRPC;
//                  at concurrency 1 also the median time between two tokens
//                  of a request (the engine's per-token cost, sampling and
//                  event delivery included) and the decode step inside it
//   decode_flops   one decode step of 64 sequences: model FLOPs
//                  (2 x parameters x rows) per second, against a large
//                  torch::mm timed in the same loop (the machine's peak);
//                  the loop alternates blocks of steps and of products, so
//                  each side runs warm, as a serving loop's steps do
//   prefill        512 prompt tokens prefilled vs stepped one by one
//   context        one step at context 128 vs 4096 (inter-token latency)
//
// The last line of output is a JSON object with every number.
#include <torch/torch.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "model/backend/native_backend.h"
#include "model/backend/row_pool.h"
#include "model/lm/language_model.h"
#include "model/lm/model_package.h"
#include "model/text/tokenizer.h"
#include "server/engine/engine.h"
#include "util/cpus.h"

ABSL_FLAG(std::string, model, "models/aft-conv.pt", "Model package.");
ABSL_FLAG(int, threads, 0, "Intra-op threads; 0: the usable CPUs.");
ABSL_FLAG(std::vector<std::string>, concurrency, std::vector<std::string>({"1", "8", "64", "256"}),
          "Requests in flight for the throughput runs.");
ABSL_FLAG(int64_t, prompt_tokens, 128, "Prompt length of the throughput runs.");
ABSL_FLAG(int64_t, max_tokens, 128, "Tokens generated per request.");
ABSL_FLAG(int64_t, requests_per_slot, 3, "Requests per unit of concurrency (closed loop).");
ABSL_FLAG(int, repeats, 30, "Samples per timed comparison (medians are reported).");
ABSL_FLAG(bool, throughput_only, false,
          "Only the closed-loop throughput runs (for interleaving with gRPC runs).");
ABSL_FLAG(int64_t, wide_d_model, 512,
          "Also measure decode FLOPs on an untrained model of this width (and 4x that feed-forward"
          " width), otherwise like the package's; 0: skip.");

namespace {

using attn::serving::Engine;
using attn::serving::EngineOptions;
using attn::serving::EngineRequest;
using attn::serving::RequestStream;
using attn::serving::StreamEvent;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

template <typename Fn>
double Seconds(Fn&& fn) {
  const absl::Time start = absl::Now();
  fn();
  return absl::ToDoubleSeconds(absl::Now() - start);
}

std::vector<int64_t> Prompt(int64_t length, int64_t vocab, int64_t offset) {
  std::vector<int64_t> ids(length);
  for (int64_t i = 0; i < length; ++i) ids[i] = 3 + (offset + i * 7919) % (vocab - 3);
  return ids;
}

struct ThroughputResult {
  double tokens_per_second = 0;
  double median_token_interval_ms = 0;  // between consecutive tokens of a request
  double median_decode_step_ms = 0;     // the model's decode step inside that interval
  double mean_decode_step_ms = 0;       // over the run, every batch size
  double mean_prefill_step_ms = 0;      // one batched prefill chunk
};

// Records how long the engine's steps take (model call and logits copy):
// every decode step, for the median at concurrency 1, and the totals of
// both phases, which the server's attn_step_duration_seconds also exports,
// so that a gRPC run's steps can be set against these.
class StepTimer : public attn::serving::EngineObserver {
 public:
  void OnStep(Phase phase, absl::Duration took, int64_t /*rows*/, int64_t /*tokens*/) override {
    const double ms = absl::ToDoubleMilliseconds(took);
    if (phase == Phase::kDecode) {
      decode_ms_.push_back(ms);
    } else {
      prefill_total_ms_ += ms;
      ++prefills_;
    }
  }
  double median_decode_ms() const { return Median(decode_ms_); }
  double mean_decode_ms() const {
    double total = 0;
    for (double ms : decode_ms_) total += ms;
    return decode_ms_.empty() ? 0.0 : total / static_cast<double>(decode_ms_.size());
  }
  double mean_prefill_ms() const {
    return prefills_ == 0 ? 0.0 : prefill_total_ms_ / static_cast<double>(prefills_);
  }

 private:
  // Engine thread only, read after Stop().
  std::vector<double> decode_ms_;
  double prefill_total_ms_ = 0;
  int64_t prefills_ = 0;
};

// Generated tokens per second with `concurrency` requests kept in flight.
ThroughputResult Throughput(attn::CausalLm& model, const attn::Tokenizer& tokenizer,
                            int concurrency) {
  const int64_t max_tokens = absl::GetFlag(FLAGS_max_tokens);
  EngineOptions options;
  options.max_active = concurrency;
  options.max_waiting = concurrency;
  options.stream_buffer = max_tokens + 2;  // never pauses: the bench reads only at the end
  StepTimer step_timer;
  Engine engine(model, tokenizer, options, attn::RealClock(), &step_timer);
  engine.Start();
  const int64_t total = concurrency * absl::GetFlag(FLAGS_requests_per_slot);
  const int64_t vocab = model->config().vocab_size;
  // Each stream's events are counted on the engine thread as they come (as
  // the server's reactors do); the main thread sleeps until a request ends.
  // Polling from here instead would preempt the engine's intra-op threads
  // on a 2-core machine and distort the numbers.
  std::mutex mu;
  std::condition_variable ended;
  int64_t tokens = 0, finished = 0, submitted = 0;
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<double> intervals;  // ms; one request at a time when concurrency is 1
  auto submit = [&] {
    EngineRequest request;
    request.prompt = Prompt(absl::GetFlag(FLAGS_prompt_tokens), vocab, submitted);
    request.max_tokens = max_tokens;
    request.sampling.temperature = 0;
    request.ignore_eos = true;
    auto stream = std::make_shared<RequestStream>(max_tokens + 2);
    RequestStream* raw = stream.get();
    auto previous = std::make_shared<absl::Time>(absl::InfinitePast());
    stream->SetListener([&, raw, previous] {
      // Runs on the engine thread after each push, so one event at a time.
      for (const StreamEvent& event : raw->PopReady()) {
        const absl::Time now = absl::Now();
        std::lock_guard<std::mutex> lock(mu);
        if (concurrency == 1 && *previous != absl::InfinitePast() && !event.token_ids.empty()) {
          intervals.push_back(absl::ToDoubleMilliseconds(now - *previous));
        }
        if (!event.token_ids.empty()) *previous = now;
        tokens += static_cast<int64_t>(event.token_ids.size());
        if (event.last) {
          ++finished;
          ended.notify_one();
        }
      }
    });
    streams.push_back(stream);
    ++submitted;
    if (!engine.Submit(std::move(request), stream).ok()) std::abort();
  };
  const absl::Time start = absl::Now();
  std::unique_lock<std::mutex> lock(mu);
  for (int i = 0; i < concurrency; ++i) submit();
  int64_t replaced = 0;
  while (finished < total) {
    ended.wait(lock, [&] { return finished > replaced; });
    for (; replaced < finished; ++replaced) {
      if (submitted < total) submit();
    }
  }
  lock.unlock();
  engine.Stop();
  for (auto& stream : streams) stream->ClearListener();
  return {static_cast<double>(tokens) / absl::ToDoubleSeconds(absl::Now() - start),
          Median(intervals), step_timer.median_decode_ms(), step_timer.mean_decode_ms(),
          step_timer.mean_prefill_ms()};
}

struct Flops {
  double step_ms, model_gflops, mm_gflops;
};

// A decode step of 64 rows against a 1024^3 matmul, interleaved.
Flops DecodeFlops(attn::CausalLm& model) {
  const int64_t rows = 64;
  attn::NativeBackend backend(model);
  backend.AllocateRows(rows).IgnoreError();  // a failure shows as Acquire's
  attn::RowPool pool(backend);
  std::vector<int64_t> slot_ids;
  for (int64_t i = 0; i < rows; ++i) slot_ids.push_back(pool.Acquire().value());
  torch::Tensor slots = torch::tensor(slot_ids);
  const int64_t vocab = model->config().vocab_size;
  model->prefill(torch::tensor(Prompt(rows * 16, vocab, 5)).view({rows, 16}), backend.state(),
                 slots);
  torch::Tensor tokens = torch::tensor(Prompt(rows, vocab, 9));
  torch::Tensor a = torch::randn({1024, 1024}), b = torch::randn({1024, 1024});
  std::vector<double> step, mm;
  for (int block = 0; block < absl::GetFlag(FLAGS_repeats) / 3 + 1; ++block) {
    for (int i = 0; i < 6; ++i) {
      const double s = Seconds([&] { model->step(tokens, slots, backend.state()); });
      if (block > 0 && i > 0) step.push_back(s);  // the first of a block warms up
    }
    for (int i = 0; i < 3; ++i) {
      const double m = Seconds([&] { torch::mm(a, b); });
      if (block > 0 && i > 0) mm.push_back(m);
    }
  }
  const double flops = 2.0 * static_cast<double>(model->parameter_count()) * rows;
  return {Median(step) * 1e3, flops / Median(step) / 1e9,
          2.0 * 1024 * 1024 * 1024 / Median(mm) / 1e9};
}

// 512 prompt tokens: prefill (chunks of 256, as the server does) vs 512 steps.
struct PrefillTiming {
  double prefill_ms, steps_ms;
  double speedup;  // the median of each pair's steps / prefill
};

PrefillTiming PrefillVsSteps(attn::CausalLm& model) {
  attn::NativeBackend backend(model);
  backend.AllocateRows(2).IgnoreError();  // a failure shows as Acquire's
  attn::RowPool pool(backend);
  const int64_t a = pool.Acquire().value(), b = pool.Acquire().value();
  const auto prompt = Prompt(512, model->config().vocab_size, 3);
  std::vector<double> prefill, steps, ratios;
  // Each sample is short and this machine has bursts of steal that slow
  // the L3-bound steps and the compute-bound prefill by different amounts:
  // enough pairs that the median rides them out, and the ratio taken within
  // each pair, a tenth of a second apart, rather than between medians.
  const int repeats = std::max(10, absl::GetFlag(FLAGS_repeats));
  for (int i = 0; i < repeats; ++i) {
    model->ResetSlots(backend.state(), torch::tensor({a, b}));
    prefill.push_back(Seconds([&] {
      for (int64_t begin = 0; begin < 512; begin += 256) {
        std::vector<int64_t> chunk(prompt.begin() + begin, prompt.begin() + begin + 256);
        // As the server prefills a prompt: logits of its last token only.
        model->prefill(
            torch::tensor(chunk).view({1, 256}), backend.state(), torch::tensor({a}),
            begin + 256 == 512 ? attn::PrefillLogits::kLast : attn::PrefillLogits::kNone);
      }
    }));
    steps.push_back(Seconds([&] {
      for (int64_t id : prompt)
        model->step(torch::tensor({id}), torch::tensor({b}), backend.state());
    }));
    ratios.push_back(steps.back() / prefill.back());
  }
  return {Median(prefill) * 1e3, Median(steps) * 1e3, Median(ratios)};
}

// Batch-1 step latency at context ~128 and ~4096, interleaved.
std::pair<double, double> ContextLatency(attn::CausalLm& model) {
  const int64_t limit = model->max_context();
  const int64_t long_context = limit > 0 ? std::min<int64_t>(4096, limit) - 256 : 4096;
  attn::NativeBackend backend(model);
  backend.AllocateRows(2).IgnoreError();  // a failure shows as Acquire's
  attn::RowPool pool(backend);
  const int64_t near = pool.Acquire().value(), far = pool.Acquire().value();
  const int64_t vocab = model->config().vocab_size;
  auto fill = [&](int64_t slot, int64_t length) {
    for (int64_t begin = 0; begin < length; begin += 256) {
      const int64_t n = std::min<int64_t>(256, length - begin);
      model->prefill(torch::tensor(Prompt(n, vocab, begin)).view({1, n}), backend.state(),
                     torch::tensor({slot}));
    }
  };
  fill(near, 128);
  fill(far, long_context);
  std::vector<double> at_near, at_far;
  const int samples = absl::GetFlag(FLAGS_repeats) * 4;
  for (int i = 0; i < samples; ++i) {
    at_near.push_back(
        Seconds([&] { model->step(torch::tensor({7L}), torch::tensor({near}), backend.state()); }));
    at_far.push_back(
        Seconds([&] { model->step(torch::tensor({7L}), torch::tensor({far}), backend.state()); }));
  }
  return {Median(at_near) * 1e3, Median(at_far) * 1e3};
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (!attn::KeepFreedMemoryForReuse()) {
    std::fprintf(stderr, "warning: the C allocator kept its defaults; prefills may run slower\n");
  }
  const int threads = attn::ConfigureThreads(absl::GetFlag(FLAGS_threads));
  auto package = attn::LoadPackage(absl::GetFlag(FLAGS_model));
  if (!package.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(package.status().message()).c_str());
    return 1;
  }
  auto tokenizer = attn::PackageTokenizer(*package);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "error: the package's tokenizer: %s\n",
                 std::string(tokenizer.status().message()).c_str());
    return 1;
  }
  attn::CausalLm& model = package->model;
  torch::InferenceMode inference;
  const std::string mixer = attn::MixerKindName(model->config().mixer);
  std::printf("model %s (%s, %ld parameters), %d threads\n", absl::GetFlag(FLAGS_model).c_str(),
              mixer.c_str(), static_cast<long>(model->parameter_count()), threads);

  // Per concurrency: tokens/s, and the mean decode step and prefill chunk.
  std::vector<std::string> throughput_json, decode_json, prefill_json;
  double token_interval_ms = 0, decode_step_c1_ms = 0;
  for (const std::string& text : absl::GetFlag(FLAGS_concurrency)) {
    const int concurrency = std::stoi(text);
    std::fprintf(stderr, "throughput at concurrency %d...\n", concurrency);
    const ThroughputResult result = Throughput(model, *tokenizer, concurrency);
    std::printf("throughput  concurrency %4d: %9.1f tokens/s\n", concurrency,
                result.tokens_per_second);
    throughput_json.push_back(absl::StrCat("\"", concurrency, "\": ", result.tokens_per_second));
    decode_json.push_back(absl::StrCat("\"", concurrency, "\": ", result.mean_decode_step_ms));
    prefill_json.push_back(absl::StrCat("\"", concurrency, "\": ", result.mean_prefill_step_ms));
    if (concurrency == 1) {
      token_interval_ms = result.median_token_interval_ms;
      decode_step_c1_ms = result.median_decode_step_ms;
      std::printf("median time between tokens at concurrency 1: %.3f ms (decode step %.3f ms)\n",
                  token_interval_ms, decode_step_c1_ms);
    }
  }
  if (absl::GetFlag(FLAGS_throughput_only)) {
    std::printf(
        "{\"model\": \"%s\", \"threads\": %d, \"throughput\": {%s}, "
        "\"decode_step_ms\": {%s}, \"prefill_step_ms\": {%s}, "
        "\"token_interval_c1_ms\": %.4f, \"decode_step_c1_ms\": %.4f}\n",
        absl::GetFlag(FLAGS_model).c_str(), threads, absl::StrJoin(throughput_json, ", ").c_str(),
        absl::StrJoin(decode_json, ", ").c_str(), absl::StrJoin(prefill_json, ", ").c_str(),
        token_interval_ms, decode_step_c1_ms);
    return 0;
  }
  std::fprintf(stderr, "decode FLOPs at 64 rows...\n");
  const Flops flops = DecodeFlops(model);
  std::printf(
      "decode 64 rows: %.3f ms/step, %.1f model GFLOP/s, torch::mm %.1f GFLOP/s, ratio %.2f\n",
      flops.step_ms, flops.model_gflops, flops.mm_gflops, flops.model_gflops / flops.mm_gflops);
  // The same architecture made wider: how much of the matmul peak the
  // engine's decode reaches once the matrices are not tiny. Weights are
  // random; a step's cost does not depend on their values.
  const int64_t wide = absl::GetFlag(FLAGS_wide_d_model);
  Flops wide_flops{0, 0, 0};
  int64_t wide_parameters = 0;
  if (wide > 0) {
    attn::LmConfig config = model->config();
    config.d_model = wide;
    config.ff_hidden = 4 * wide;
    std::fprintf(stderr, "decode FLOPs at 64 rows, d_model %ld...\n", static_cast<long>(wide));
    attn::CausalLm wide_model(config);
    wide_model->eval();
    wide_parameters = wide_model->parameter_count();
    wide_flops = DecodeFlops(wide_model);
    std::printf(
        "d_model %ld (%ld parameters), decode 64 rows: %.3f ms/step, %.1f model GFLOP/s, "
        "torch::mm %.1f GFLOP/s, ratio %.2f\n",
        static_cast<long>(wide), static_cast<long>(wide_parameters), wide_flops.step_ms,
        wide_flops.model_gflops, wide_flops.mm_gflops,
        wide_flops.model_gflops / wide_flops.mm_gflops);
  }
  std::fprintf(stderr, "prefill vs steps...\n");
  const PrefillTiming prefill = PrefillVsSteps(model);
  std::printf("512 tokens: prefill %.2f ms, stepping %.2f ms, ratio %.1f\n", prefill.prefill_ms,
              prefill.steps_ms, prefill.speedup);
  std::fprintf(stderr, "context 128 vs 4096...\n");
  const auto [near_ms, far_ms] = ContextLatency(model);
  std::printf("step at batch 1: context 128 %.3f ms, long context %.3f ms, ratio %.3f\n", near_ms,
              far_ms, far_ms / near_ms);
  std::printf(
      "{\"model\": \"%s\", \"mixer\": \"%s\", \"parameters\": %ld, \"threads\": %d, "
      "\"throughput\": {%s}, \"token_interval_c1_ms\": %.4f, \"decode_step_c1_ms\": %.4f, "
      "\"decode64_ms\": %.4f, \"decode64_model_gflops\": %.2f, "
      "\"mm_gflops\": %.2f, \"wide_d_model\": %ld, \"wide_parameters\": %ld, "
      "\"wide_decode64_ms\": %.4f, \"wide_decode64_model_gflops\": %.2f, \"wide_mm_gflops\": %.2f, "
      "\"prefill512_ms\": %.3f, \"step512_ms\": %.3f, \"prefill_speedup\": %.2f, "
      "\"step_ctx128_ms\": %.4f, \"step_ctx_long_ms\": %.4f}\n",
      absl::GetFlag(FLAGS_model).c_str(), mixer.c_str(),
      static_cast<long>(model->parameter_count()), threads,
      absl::StrJoin(throughput_json, ", ").c_str(), token_interval_ms, decode_step_c1_ms,
      flops.step_ms, flops.model_gflops, flops.mm_gflops, static_cast<long>(wide),
      static_cast<long>(wide_parameters), wide_flops.step_ms, wide_flops.model_gflops,
      wide_flops.mm_gflops, prefill.prefill_ms, prefill.steps_ms, prefill.speedup, near_ms, far_ms);
  return 0;
}
