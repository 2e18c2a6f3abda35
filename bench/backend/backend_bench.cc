// attn-backend-bench: one decode step of a package through the native
// backend (fused kernels) and through the TorchScript backend (the package's
// own methods), and through the native backend with int8 and bf16 weights
// (--quantize=int8, --quantize=bf16), at each batch size, timed in one interleaved loop because
// this machine's speed drifts between runs. Where the TorchScript time goes:
// the same step called on the module directly, without the backend's
// gather and write-back of pool rows. Then prefills of --prefill_tokens,
// float32 against int8 and bf16 weights. With --check_tokens, a speculation
// round's check of that many tokens and its rollbacks, by replaying the
// layers' recorded inputs against feeding the kept tokens again.
//
//   attn-backend-bench --model=models/aft-conv.pt --batch=1,64
//
// With --device=cuda the weights and rows live on that GPU and every timing
// waits for the device to finish. With --shape=NAME a public model's shape
// (rwkv7-7.2b, mamba2-2.7b, ...) with random weights stands in for a package:
//
//   attn-backend-bench --device=cuda --shape=rwkv7-1.5b --backends=native,bf16
//
// The last line of output is a JSON object with every median.
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "model/backend/native_backend.h"
#include "model/backend/torchscript_backend.h"
#include "model/checkpoints/public_shapes.h"
#include "model/lm/model_package.h"
#include "util/cpus.h"
#include "util/memory.h"

ABSL_FLAG(std::string, model, "models/aft-conv.pt", "Model package.");
ABSL_FLAG(std::string, shape, "",
          "A public model's shape with random weights instead of --model (rwkv7-0.1b ... "
          "rwkv7-7.2b, mamba2-130m ... mamba2-2.7b: model/checkpoints/public_shapes.h); native, "
          "int8 and bf16 only.");
ABSL_FLAG(std::string, device, "cpu",
          "Where the weights and rows live: cpu, cuda or cuda:N (timings then wait for the GPU).");
ABSL_FLAG(int, threads, 0, "Intra-op threads; 0: the usable CPUs.");
ABSL_FLAG(std::vector<std::string>, batch, std::vector<std::string>({"1", "64"}),
          "Rows per decode step.");
ABSL_FLAG(int, repeats, 200, "Steps timed per backend and batch (medians are reported).");
ABSL_FLAG(int64_t, context, 64, "Tokens each row holds before the timed steps.");
ABSL_FLAG(std::vector<std::string>, backends,
          std::vector<std::string>({"native", "int8", "torchscript", "module"}),
          "Which steps to time: native, int8 (native with int8 weights), bf16 (native with bf16 "
          "weights), torchscript (the "
          "backend), module (the package's own step); the others report 0. One alone suits a "
          "profiler.");
ABSL_FLAG(std::vector<std::string>, prefill_tokens, std::vector<std::string>({"512"}),
          "Prompt lengths of the prefill comparison, float32 against int8 and bf16 weights, "
          "comma-separated (0: none); the JSON line holds the first's.");
ABSL_FLAG(int, prefill_repeats, 20, "Prefills timed per weight type.");
ABSL_FLAG(double, bandwidth_gbs, 0,
          "The device's copy rate in GB/s (scripts/gpu/ceilings.py): > 0 prints batch 1's "
          "steps as fractions of the bound it sets, the weights' bytes over that rate.");
ABSL_FLAG(int64_t, check_tokens, 0,
          "With N > 0: a speculation round's check of N tokens in row 0 (PrefillForRollBack) and "
          "its rollback to the first 1 and (N + 1) / 2 tokens, replayed (RollBackRow) against fed "
          "again (LmBackend's default), timed per weight type.");

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// The medians of the backends that were timed (0: not timed), with the
// ratios whose two sides both were.
std::string StepLine(double native, double int8, double bf16, double script, double module) {
  std::vector<std::string> parts;
  if (native > 0) parts.push_back(absl::StrFormat("native %.3f ms", native));
  for (auto [name, ms] : {std::pair{"int8", int8}, std::pair{"bf16", bf16}}) {
    if (ms <= 0) continue;
    parts.push_back(absl::StrFormat("native %s %.3f ms", name, ms) +
                    (native > 0 ? absl::StrFormat(" (%.2fx faster)", native / ms) : ""));
  }
  if (script > 0) {
    parts.push_back(absl::StrFormat("torchscript backend %.3f ms", script) +
                    (native > 0 ? absl::StrFormat(" (%.2fx native)", script / native) : ""));
  }
  if (module > 0) parts.push_back(absl::StrFormat("module alone %.3f ms", module));
  return absl::StrJoin(parts, ", ");
}

// Set from --device: a GPU's work is asynchronous, so a timing waits for it.
bool g_on_gpu = false;

template <typename Fn>
double Milliseconds(Fn&& fn) {
  const absl::Time start = absl::Now();
  fn();
  if (g_on_gpu) torch::cuda::synchronize();
  return absl::ToDoubleMilliseconds(absl::Now() - start);
}

void Check(const absl::Status& status) {
  if (!status.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
    std::exit(1);
  }
}

// Refuses, before any is filled, `rows` rows of `row_bytes` in each of
// `backends` that the memory left cannot hold. A CPU's pools are mapped
// lazily and the prefill below writes every row: rows that do not fit would
// swap for minutes and then bring the out-of-memory killer. (A GPU
// allocation that does not fit fails at once, with its size.)
void CheckRowsFit(const torch::Device& device, int64_t rows, int64_t backends, int64_t row_bytes) {
  const std::optional<int64_t> available = attn::AvailableMemoryBytes();
  if (!device.is_cpu() || !available.has_value()) return;
  const double need = static_cast<double>(rows) * static_cast<double>(backends * row_bytes);
  if (need <= static_cast<double>(*available)) return;
  Check(absl::ResourceExhaustedError(absl::StrFormat(
      "%d rows of %.1f MB of state in each of %d backends need %.2f GB, more than the %.2f GB "
      "of memory available: lower the largest --batch or time fewer --backends",
      rows, row_bytes / 1e6, backends, need / 1e9, *available / 1e9)));
}

// A check of `length` random tokens in row 0 of `backend`, the copy of the
// row a round takes before it (SaveRowForRollBack), and the rollbacks to
// `kept` tokens after it, replayed and fed again, timed in one interleaved
// loop: "check X ms, save S ms, to K: replay Y ms, fed again Z ms (Rx)".
std::string TimeRollBacks(attn::NativeBackend& backend, int64_t length, int repeats) {
  const torch::Tensor drawn = torch::randint(3, backend.vocab_size(), {length}, torch::kLong);
  const std::vector<int64_t> tokens(drawn.data_ptr<int64_t>(), drawn.data_ptr<int64_t>() + length);
  const absl::StatusOr<attn::SavedRow> saved = backend.SaveRow(0);
  Check(saved.status());
  std::vector<double> check_ms, save_ms;
  std::string line;
  for (int64_t kept : {int64_t{1}, (length + 1) / 2}) {
    const std::vector<int64_t> prefix(tokens.begin(), tokens.begin() + kept);
    std::vector<double> replay_ms, refeed_ms;
    // Each check starts where `saved` was taken, as a round's does.
    for (int i = 0; i < repeats; ++i) {
      Check(backend.LoadRow(0, *saved));
      save_ms.push_back(Milliseconds([&] { Check(backend.SaveRowForRollBack(0).status()); }));
      check_ms.push_back(
          Milliseconds([&] { Check(backend.PrefillForRollBack({0}, {tokens}).status()); }));
      replay_ms.push_back(Milliseconds([&] { Check(backend.RollBackRow(0, *saved, prefix)); }));
      Check(backend.LoadRow(0, *saved));
      Check(backend.PrefillForRollBack({0}, {tokens}).status());
      refeed_ms.push_back(
          Milliseconds([&] { Check(backend.LmBackend::RollBackRow(0, *saved, prefix)); }));
    }
    const double replay = Median(replay_ms), refeed = Median(refeed_ms);
    absl::StrAppendFormat(&line, ", to %ld: replay %.3f ms, fed again %.3f ms (%.2fx)",
                          static_cast<long>(kept), replay, refeed, refeed / replay);
  }
  return absl::StrFormat("check %ld tokens %.3f ms, save %.3f ms", static_cast<long>(length),
                         Median(check_ms), Median(save_ms)) +
         line;
}

// A prompt of `length` tokens read into an empty row by each of the timed
// models in turn (null: not timed); prints the medians and returns them as
// the JSON line's ", \"prefill\": {...}".
std::string TimePrefill(attn::NativeBackend* native, attn::NativeBackend* int8,
                        attn::NativeBackend* bf16, int64_t vocab, int64_t length) {
  const int repeats = absl::GetFlag(FLAGS_prefill_repeats);
  const torch::Tensor row = torch::zeros({1}, torch::kLong);
  const torch::Tensor prompt = torch::randint(3, vocab, {1, length}, torch::kLong);
  std::vector<double> float_ms, int8_ms, bf16_ms;
  std::fprintf(stderr, "prefill of %ld tokens: %d each...\n", static_cast<long>(length), repeats);
  std::vector<std::pair<attn::NativeBackend*, std::vector<double>*>> timings;
  if (native != nullptr) timings.emplace_back(native, &float_ms);
  if (int8 != nullptr) timings.emplace_back(int8, &int8_ms);
  if (bf16 != nullptr) timings.emplace_back(bf16, &bf16_ms);
  for (int i = 0; i < repeats; ++i) {
    for (auto [backend, times] : timings) {
      Check(backend->ResetRow(0));
      times->push_back(Milliseconds(
          [&] { Check(backend->Prefill(prompt, row, attn::PrefillLogits::kLast).status()); }));
    }
  }
  const double f = Median(float_ms), q = Median(int8_ms), h = Median(bf16_ms);
  std::printf("prefill %ld tokens: %s\n", static_cast<long>(length),
              StepLine(f, q, h, 0, 0).c_str());
  return absl::StrCat(", \"prefill\": {\"tokens\": ", length, ", \"native_ms\": ", f,
                      ", \"native_int8_ms\": ", q, ", \"native_bf16_ms\": ", h, "}");
}

// Batch 1's medians (0: not timed) as fractions of what reading the dense
// weights once at --bandwidth_gbs takes: float32's bytes, int8's quarter
// (its scales aside) and bf16's half.
void PrintBandwidthBound(int64_t float_bytes, double native, double int8, double bf16) {
  const double rate = absl::GetFlag(FLAGS_bandwidth_gbs);
  if (rate <= 0) return;
  std::string line;
  for (auto [name, ms, bytes] : {std::tuple{"native", native, float_bytes / 1.0},
                                 std::tuple{"native int8", int8, float_bytes / 4.0},
                                 std::tuple{"native bf16", bf16, float_bytes / 2.0}}) {
    if (ms <= 0) continue;
    const double bound_ms = bytes / (rate * 1e9) * 1e3;
    absl::StrAppendFormat(&line, "%s%s %.3f of its bound %.3f ms", line.empty() ? "" : ", ", name,
                          bound_ms / ms, bound_ms);
  }
  if (!line.empty()) std::printf("batch   1 against %.0f GB/s: %s\n", rate, line.c_str());
}

// The model of --shape (random weights, the same for every call) or of
// --model's package, on `device`.
attn::CausalLm LoadModel(const torch::Device& device) {
  const std::string shape = absl::GetFlag(FLAGS_shape);
  if (shape.empty()) {
    auto package = attn::LoadPackage(absl::GetFlag(FLAGS_model), device);
    Check(package.status());
    return package->model;
  }
  absl::StatusOr<attn::LmConfig> config = attn::PublicShapeConfig(shape);
  Check(config.status());
  std::fprintf(stderr, "building %s with random weights...\n", shape.c_str());
  torch::manual_seed(1);
  attn::CausalLm model(*config);
  model->eval();
  model->to(device);
  return model;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // As the server runs: freed buffers kept for reuse, so a prefill's large
  // temporaries are not fresh zeroed pages every layer.
  attn::KeepFreedMemoryForReuse();
  const int threads = attn::ConfigureThreads(absl::GetFlag(FLAGS_threads));
  const std::string shape = absl::GetFlag(FLAGS_shape);
  const std::string path = shape.empty() ? absl::GetFlag(FLAGS_model) : shape;
  const torch::Device device(absl::GetFlag(FLAGS_device));
  g_on_gpu = device.is_cuda();
  const std::vector<std::string> backends = absl::GetFlag(FLAGS_backends);
  const auto timed = [&](const std::string& name) {
    return std::find(backends.begin(), backends.end(), name) != backends.end();
  };
  // A package without TorchScript methods (a hybrid's) runs natively only.
  const bool scripted = timed("torchscript") || timed("module");
  if (!shape.empty()) Check(attn::PublicShapeConfig(shape).status());
  if (scripted && !shape.empty()) {
    Check(
        absl::InvalidArgumentError("--shape has no TorchScript methods: time native, int8 or "
                                   "bf16 (--backends)"));
  }
  const attn::CausalLm loaded = LoadModel(device);
  const int64_t float_bytes = loaded->dense_weight_bytes();  // before any quantisation
  absl::StatusOr<std::unique_ptr<attn::TorchScriptBackend>> script;
  if (scripted) {
    script = attn::TorchScriptBackend::Load(path, device);
    Check(script.status());
  }
  attn::NativeBackend native(loaded);
  // The int8 model only where it is timed, and a second copy only beside a
  // timed float one: the int8 model keeps its float weights for large
  // prefills, so each copy is the float size and more (5.8 GB and more for
  // granite-4.0-h-1b).
  // The same for bf16, which also needs a copy of its own beside int8.
  std::unique_ptr<attn::NativeBackend> native_int8, native_bf16;
  bool package_taken = timed("native");
  const auto quantized = [&](auto quantize) {
    attn::CausalLm model = package_taken ? LoadModel(device) : loaded;
    package_taken = true;
    Check(quantize(model).status());
    return std::make_unique<attn::NativeBackend>(model);
  };
  if (timed("int8")) native_int8 = quantized(attn::QuantizeInt8);
  if (timed("bf16")) native_bf16 = quantized(attn::QuantizeBf16);
  std::vector<int64_t> batches;
  for (const auto& b : absl::GetFlag(FLAGS_batch)) batches.push_back(std::stoll(b));
  const int64_t rows = *std::max_element(batches.begin(), batches.end());
  const int64_t context = absl::GetFlag(FLAGS_context);
  const int64_t vocab = native.vocab_size();
  std::printf("model %s on %s, %d threads, %ld rows at context %ld\n", path.c_str(),
              device.str().c_str(), threads, static_cast<long>(rows), static_cast<long>(context));
  // What a decode step reads, for the bound of the device's bandwidth.
  std::printf("model weights %.3f GB float32 (%.3f GB as bf16), state %.3f MB a stream\n",
              float_bytes / 1e9, float_bytes / 2e9,
              loaded->state_bytes_per_sequence(context) / 1e6);
  torch::InferenceMode inference;
  // Both backends' rows hold the same `context` tokens.
  const torch::Tensor prompt = torch::randint(3, vocab, {rows, context}, torch::kLong);
  const torch::Tensor all = torch::arange(rows, torch::kLong);
  // Only the timed backends hold rows: at granite-4.0-h-1b's shape 64 rows
  // are 3.6 GB each, and float and int8 together do not fit in 24 GB (run
  // them as two processes there, as scripts/bench/llama_peer.sh does).
  std::vector<attn::LmBackend*> prefilled;
  if (timed("native")) prefilled.push_back(&native);
  if (native_int8 != nullptr) prefilled.push_back(native_int8.get());
  if (native_bf16 != nullptr) prefilled.push_back(native_bf16.get());
  if (scripted) prefilled.push_back(script->get());
  CheckRowsFit(device, rows, static_cast<int64_t>(prefilled.size()),
               loaded->state_bytes_per_sequence(context));
  for (attn::LmBackend* backend : prefilled) {
    Check(backend->AllocateRows(rows));
    for (int64_t r = 0; r < rows; ++r) Check(backend->ResetRow(r));
    Check(backend->Prefill(prompt, all, attn::PrefillLogits::kNone).status());
  }
  // The module itself on its own state, as a Python caller would run it.
  torch::jit::Module module = scripted ? torch::jit::load(path, device) : torch::jit::Module();
  std::vector<std::string> json;
  for (int64_t batch : batches) {
    const torch::Tensor ids = torch::arange(batch, torch::kLong);
    const torch::Tensor tokens = torch::randint(3, vocab, {batch}, torch::kLong);
    c10::IValue state;
    if (scripted) {
      state = module.get_method("init_state")({batch});
      state = module.get_method("prefill")({prompt.narrow(0, 0, batch).to(device), state})
                  .toTupleRef()
                  .elements()[1];
    }
    std::vector<double> native_ms, int8_ms, bf16_ms, script_ms, module_ms;
    const int repeats = absl::GetFlag(FLAGS_repeats);
    std::fprintf(stderr, "batch %ld: %d steps each...\n", static_cast<long>(batch), repeats);
    for (int i = 0; i < repeats; ++i) {
      if (timed("native")) {
        native_ms.push_back(Milliseconds([&] { native.Step(tokens, ids).value(); }));
      }
      if (timed("int8")) {
        int8_ms.push_back(Milliseconds([&] { native_int8->Step(tokens, ids).value(); }));
      }
      if (timed("bf16")) {
        bf16_ms.push_back(Milliseconds([&] { native_bf16->Step(tokens, ids).value(); }));
      }
      if (timed("torchscript")) {
        script_ms.push_back(Milliseconds([&] { (*script)->Step(tokens, ids).value(); }));
      }
      if (timed("module")) {
        module_ms.push_back(Milliseconds([&] {
          state = module.get_method("step")({tokens.to(device), state}).toTupleRef().elements()[1];
        }));
      }
    }
    const double n = Median(native_ms), q = Median(int8_ms), h = Median(bf16_ms),
                 s = Median(script_ms), m = Median(module_ms);
    std::printf("batch %3ld: %s\n", static_cast<long>(batch), StepLine(n, q, h, s, m).c_str());
    if (batch == 1) PrintBandwidthBound(float_bytes, n, q, h);
    json.push_back(absl::StrCat("\"", batch, "\": {\"native_ms\": ", n, ", \"native_int8_ms\": ", q,
                                ", \"native_bf16_ms\": ", h, ", \"torchscript_ms\": ", s,
                                ", \"module_ms\": ", m, "}"));
  }
  // A prompt read into an empty row by each timed model in turn.
  std::string prefill_json;
  for (const std::string& tokens : absl::GetFlag(FLAGS_prefill_tokens)) {
    const int64_t length = std::stoll(tokens);
    if (length <= 0) continue;
    const std::string timed_json = TimePrefill(timed("native") ? &native : nullptr,
                                               native_int8.get(), native_bf16.get(), vocab, length);
    if (prefill_json.empty()) prefill_json = timed_json;
  }
  if (const int64_t length = absl::GetFlag(FLAGS_check_tokens); length > 0) {
    std::vector<std::pair<const char*, attn::NativeBackend*>> timings;
    if (timed("native")) timings.emplace_back("float32", &native);
    if (native_int8 != nullptr) timings.emplace_back("int8", native_int8.get());
    if (native_bf16 != nullptr) timings.emplace_back("bf16", native_bf16.get());
    for (auto [name, backend] : timings) {
      std::printf("%s: %s\n", name,
                  TimeRollBacks(*backend, length, absl::GetFlag(FLAGS_prefill_repeats)).c_str());
    }
  }
  std::printf("{\"model\": \"%s\", \"threads\": %d, \"context\": %ld, \"steps\": {%s}%s}\n",
              path.c_str(), threads, static_cast<long>(context), absl::StrJoin(json, ", ").c_str(),
              prefill_json.c_str());
  return 0;
}
