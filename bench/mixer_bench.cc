// Per-token step cost of every mixer against context length and batch, the
// same step's matrix multiplications alone, and the parallel forward against
// sequence length. scripts/bench/run_benchmarks.sh runs it and writes the table in
// docs/benchmarks.md.
//
//   Step/<kind>/batch:<B>/context:<L>   one step() of B sequences at length L
//   Ratio/<kind>/batch:1/context:<L>    step() and that step's matrix
//                                       multiplications alone, interleaved in
//                                       one loop; counter ratio = step / matmuls
//   Flatness/<kind>/batch:<B>           a step of B rows at 64 tokens and one of
//                                       B rows at 8192, interleaved in one loop;
//                                       counter ratio = long / short
//   Parallel/<kind>/time:<T>            forward() over T tokens, batch 1
//   OpByOp/<kind>/batch:<B>             the step a GPU runs (the fused CPU
//                                       kernels off) of B rows at 64 tokens;
//                                       counter ops = the ATen operators it
//                                       calls, each at least one kernel
//                                       launch on a GPU
//
// The interleaved benchmarks exist because this machine's speed drifts by
// tens of percent between runs: a ratio of two separate runs is noise.
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "model/mixers/mixer.h"
#include "util/cpus.h"

namespace attn {
namespace {

constexpr int64_t kDModel = 256;
constexpr int64_t kHeads = 4;
constexpr int64_t kWindow = 32;
constexpr int64_t kLongestContext = 8192;

MixerOptions BenchOptions(MixerKind kind, int64_t max_context) {
  MixerOptions o;
  o.kind = kind;
  o.d_model = kDModel;
  o.heads = kHeads;
  o.window = kWindow;
  o.max_context = max_context;
  o.chunk = 64;
  return o;
}

bool HasCache(MixerKind kind) {
  return kind == MixerKind::kMha || kind == MixerKind::kMhaAlibi || kind == MixerKind::kRelative;
}
bool IsLinear(MixerKind kind) {
  return kind == MixerKind::kLinearElu || kind == MixerKind::kLinearExp ||
         kind == MixerKind::kLinearDecay;
}
bool HasWindow(MixerKind kind) {
  return kind == MixerKind::kAftFull || kind == MixerKind::kAftLocal ||
         kind == MixerKind::kAftConv || kind == MixerKind::kAftDecay;
}

// One mixer and one state pool at a time: an MHA pool of 64 sequences at
// 8192 tokens is a gigabyte.
struct Fixture {
  MixerKind kind;
  int64_t batch = 0;
  bool fused = true;
  std::shared_ptr<SequenceMixer> mixer;
  MixerState state;
};

Fixture& FixtureFor(MixerKind kind, int64_t rows, bool fused = true) {
  static Fixture fixture{};
  if (fixture.mixer && fixture.kind == kind && fixture.batch == rows && fixture.fused == fused) {
    return fixture;
  }
  fixture = Fixture{};
  fixture.kind = kind;
  fixture.batch = rows;
  fixture.fused = fused;
  MixerOptions options = BenchOptions(kind, kLongestContext + 1);
  options.fused_kernels = fused;
  fixture.mixer = MakeMixer(options);
  fixture.mixer->eval();
  fixture.state = fixture.mixer->initial_state(rows, torch::kCPU);
  // Any positive values are a valid state for every kind (finite running
  // maxima, positive normalisers); the step's cost does not depend on them.
  for (auto& t : fixture.state.tensors) t.uniform_(0.1, 1.0);
  return fixture;
}

// Keeps the rows `first..first+count` of the fixture at `context` tokens.
void Rewind(Fixture& f, int64_t first, int64_t count, int64_t context) {
  auto* lengths = f.state.length.data_ptr<int64_t>();
  for (int64_t b = first; b < first + count; ++b) lengths[b] = context;
}

void BM_Step(benchmark::State& bench, MixerKind kind, int64_t batch, int64_t context) {
  c10::InferenceMode inference;
  auto& f = FixtureFor(kind, batch);
  auto x = torch::randn({batch, kDModel});
  for (auto _ : bench) {
    Rewind(f, 0, batch, context);
    benchmark::DoNotOptimize(f.mixer->step(x, f.state));
  }
  bench.SetItemsProcessed(bench.iterations() * batch);
}

// The step's matrix multiplications alone, on the mixer's own weights and
// state (so both share the caches): the in/out projections; for softmax
// attention q.K^T and p.V over row 0's cache, and for Transformer-XL also q
// against the projected distances; for linear attention phi(k) v^T and
// phi(q)^T S per head; for windowed AFT the bias-factor row times the ring of
// exp(k - c) and of exp(k - c) v.
class StepMatmuls {
 public:
  StepMatmuls(const Fixture& f, int64_t batch, int64_t context) : kind_(f.kind) {
    const int64_t dh = kDModel / kHeads, rows = batch * kHeads;
    auto params = f.mixer->named_parameters();
    w_in_ = params["in_proj.weight"];
    b_in_ = params["in_proj.bias"];
    w_out_ = params["out_proj.weight"];
    b_out_ = params["out_proj.bias"];
    x_ = torch::randn({batch, kDModel});
    q_ = torch::randn({rows, 1, dh});
    if (HasCache(kind_)) {
      const auto& k_cache = f.state.tensors[0];  // [N, H, capacity, Dh]
      const auto& v_cache = f.state.tensors[1];
      keys_ = k_cache.narrow(0, 0, batch).narrow(2, 0, context + 1).flatten(0, 1).transpose(1, 2);
      values_ = v_cache.narrow(0, 0, batch).narrow(2, 0, context + 1).flatten(0, 1);
      p_ = torch::randn({rows, 1, context + 1});
      if (kind_ == MixerKind::kRelative) distances_ = torch::randn({rows, dh, context + 1});
    }
    if (IsLinear(kind_)) {
      s_ = f.state.tensors[0].narrow(0, 0, batch).flatten(0, 1);  // [B H, Dh, Dh]
      k_col_ = torch::randn({rows, dh, 1});
      v_row_ = torch::randn({rows, 1, dh});
    }
    if (HasWindow(kind_)) {
      const int64_t visible = std::min(f.state.tensors[3].size(1), context + 1);
      ring_ek_ = f.state.tensors[3].narrow(0, 0, batch).narrow(1, 0, visible);  // [B, S, D]
      ring_ekv_ = f.state.tensors[4].narrow(0, 0, batch).narrow(1, 0, visible);
      factors_ = torch::rand({batch, 1, visible});
    }
  }

  void Run() {
    benchmark::DoNotOptimize(torch::addmm(b_in_, x_, w_in_.t()));
    if (HasCache(kind_)) {
      benchmark::DoNotOptimize(torch::bmm(q_, keys_));
      benchmark::DoNotOptimize(torch::bmm(p_, values_));
    }
    if (distances_.defined()) benchmark::DoNotOptimize(torch::bmm(q_, distances_));
    if (IsLinear(kind_)) {
      benchmark::DoNotOptimize(torch::bmm(k_col_, v_row_));
      benchmark::DoNotOptimize(torch::bmm(q_, s_));
    }
    if (HasWindow(kind_)) {
      benchmark::DoNotOptimize(torch::bmm(factors_, ring_ek_));
      benchmark::DoNotOptimize(torch::bmm(factors_, ring_ekv_));
    }
    benchmark::DoNotOptimize(torch::addmm(b_out_, x_, w_out_.t()));
  }

 private:
  MixerKind kind_;
  torch::Tensor x_, w_in_, b_in_, w_out_, b_out_, q_, keys_, values_, p_, s_, k_col_, v_row_;
  torch::Tensor distances_, ring_ek_, ring_ekv_, factors_;
};

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

void BM_Ratio(benchmark::State& bench, MixerKind kind, int64_t batch, int64_t context) {
  c10::InferenceMode inference;
  auto& f = FixtureFor(kind, batch);
  StepMatmuls matmuls(f, batch, context);
  auto x = torch::randn({batch, kDModel});
  double step_seconds = 0, matmul_seconds = 0;
  for (auto _ : bench) {
    Rewind(f, 0, batch, context);
    const auto t0 = Clock::now();
    benchmark::DoNotOptimize(f.mixer->step(x, f.state));
    const auto t1 = Clock::now();
    matmuls.Run();
    const auto t2 = Clock::now();
    step_seconds += Seconds(t1 - t0);
    matmul_seconds += Seconds(t2 - t1);
  }
  const auto per_iteration = benchmark::Counter::kAvgIterations;
  bench.counters["step_us"] = benchmark::Counter(step_seconds * 1e6, per_iteration);
  bench.counters["matmul_us"] = benchmark::Counter(matmul_seconds * 1e6, per_iteration);
  bench.counters["ratio"] = step_seconds / matmul_seconds;
}

void BM_Flatness(benchmark::State& bench, MixerKind kind, int64_t batch) {
  constexpr int64_t kShort = 64;
  c10::InferenceMode inference;
  auto& f = FixtureFor(kind, 2 * batch);
  auto short_rows = torch::arange(0, batch, torch::kLong);
  auto long_rows = torch::arange(batch, 2 * batch, torch::kLong);
  auto x = torch::randn({batch, kDModel});
  double short_seconds = 0, long_seconds = 0;
  for (auto _ : bench) {
    Rewind(f, 0, batch, kShort);
    Rewind(f, batch, batch, kLongestContext);
    const auto t0 = Clock::now();
    benchmark::DoNotOptimize(f.mixer->step(x, f.state, short_rows));
    const auto t1 = Clock::now();
    benchmark::DoNotOptimize(f.mixer->step(x, f.state, long_rows));
    const auto t2 = Clock::now();
    short_seconds += Seconds(t1 - t0);
    long_seconds += Seconds(t2 - t1);
  }
  const auto per_iteration = benchmark::Counter::kAvgIterations;
  bench.counters["short_us"] = benchmark::Counter(short_seconds * 1e6, per_iteration);
  bench.counters["long_us"] = benchmark::Counter(long_seconds * 1e6, per_iteration);
  bench.counters["ratio"] = long_seconds / short_seconds;
}

void BM_Parallel(benchmark::State& bench, MixerKind kind, int64_t time) {
  c10::InferenceMode inference;
  static std::map<MixerKind, std::shared_ptr<SequenceMixer>> mixers;
  auto& mixer = mixers[kind];
  if (!mixer) mixer = MakeMixer(BenchOptions(kind, kLongestContext));
  auto x = torch::randn({1, time, kDModel});
  for (auto _ : bench) benchmark::DoNotOptimize(mixer->forward(x));
  bench.SetItemsProcessed(bench.iterations() * time);
}

// Operators called at the top level, not those they call in turn.
thread_local int op_depth = 0;
thread_local int64_t op_calls = 0;

std::unique_ptr<at::ObserverContext> OpStart(const at::RecordFunction&) {
  if (op_depth++ == 0) ++op_calls;
  return nullptr;
}

void OpEnd(const at::RecordFunction&, at::ObserverContext*) { --op_depth; }

void BM_OpByOp(benchmark::State& bench, MixerKind kind, int64_t batch) {
  c10::InferenceMode inference;
  auto& f = FixtureFor(kind, batch, /*fused=*/false);
  auto x = torch::randn({batch, kDModel});
  Rewind(f, 0, batch, 64);
  const auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(OpStart, OpEnd).scopes({at::RecordScope::FUNCTION}));
  op_calls = 0;
  f.mixer->step(x, f.state);
  const int64_t ops = op_calls;
  at::removeCallback(handle);
  for (auto _ : bench) {
    Rewind(f, 0, batch, 64);
    benchmark::DoNotOptimize(f.mixer->step(x, f.state));
  }
  bench.counters["ops"] = static_cast<double>(ops);
  bench.SetItemsProcessed(bench.iterations() * batch);
}

std::string Name(MixerKind kind) { return MixerKindName(kind); }

void RegisterAll() {
  for (auto kind : AllMixerKinds()) {
    for (int64_t batch : {1, 64}) {
      for (int64_t context : {64, 512, 4096, 8192}) {
        const std::string name = "Step/" + Name(kind) + "/batch:" + std::to_string(batch) +
                                 "/context:" + std::to_string(context);
        benchmark::RegisterBenchmark(name.c_str(), BM_Step, kind, batch, context)
            ->Unit(benchmark::kMicrosecond);
      }
    }
    for (int64_t context : {64, 8192}) {
      const std::string name =
          "Ratio/" + Name(kind) + "/batch:1/context:" + std::to_string(context);
      benchmark::RegisterBenchmark(name.c_str(), BM_Ratio, kind, 1, context)
          ->Unit(benchmark::kMicrosecond);
    }
    for (int64_t batch : {1, 64}) {
      const std::string name = "Flatness/" + Name(kind) + "/batch:" + std::to_string(batch);
      benchmark::RegisterBenchmark(name.c_str(), BM_Flatness, kind, batch)
          ->Unit(benchmark::kMicrosecond);
    }
  }
  for (auto kind : AllMixerKinds()) {
    for (int64_t batch : {1, 64}) {
      const std::string name = "OpByOp/" + Name(kind) + "/batch:" + std::to_string(batch);
      benchmark::RegisterBenchmark(name.c_str(), BM_OpByOp, kind, batch)
          ->Unit(benchmark::kMicrosecond);
    }
  }
  for (auto kind : AllMixerKinds()) {
    for (int64_t time : {256, 1024, 4096}) {
      const std::string name = "Parallel/" + Name(kind) + "/time:" + std::to_string(time);
      benchmark::RegisterBenchmark(name.c_str(), BM_Parallel, kind, time)
          ->Unit(benchmark::kMillisecond);
    }
  }
}

int ThreadsFromEnvironment() {
  const char* env = std::getenv("ATTN_THREADS");
  return env ? std::atoi(env) : 0;  // 0: every usable CPU
}

}  // namespace
}  // namespace attn

int main(int argc, char** argv) {
  // Debian's LibTorch starts with one intra-op thread.
  attn::ConfigureThreads(attn::ThreadsFromEnvironment());
  attn::RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
