// The int8 weight product (model/kernels/int8_gemm.h) against the float32
// product the native backend uses today (LibTorch: OpenBLAS's addmv for one
// row, addmm for more), on the bundled models' matrices: d_model 160,
// ff_hidden 640, 4 layers, a 4096-token tied head. Per token that is 1.88M
// weights: 7.5 MB as float32, 1.9 MB as int8.
//
//   attn-kernel-bench [--reps=N] [--threads=N]
//
// For each row count it runs one token's products (every layer's four
// projections and the head) in float32 and in int8, alternately, `reps`
// times, and prints the median of each, their ratio, and the bytes of
// weights read per second, after the bandwidth a plain parallel read reaches
// over buffers of the same sizes. Alternating in one process is what makes
// the ratio meaningful on a machine whose speed drifts between runs.
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "model/kernels/int8_gemm.h"
#include "util/cpus.h"

ABSL_FLAG(int, reps, 400, "Alternating repetitions per row count (medians are reported).");
ABSL_FLAG(int, threads, 0, "Intra-op threads; 0: the usable CPUs.");

namespace attn {
namespace {

struct Matrix {
  int64_t out, in;
  torch::Tensor weight, bias;  // float32
  std::vector<int8_t> q;
  std::vector<float> scale;
};

std::vector<Matrix> ModelMatrices() {
  const int64_t d = 160, ff = 640, vocab = 4096, layers = 4;
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (int64_t l = 0; l < layers; ++l) {
    shapes.insert(shapes.end(), {{3 * d, d}, {d, d}, {ff, d}, {d, ff}});
  }
  shapes.push_back({vocab, d});
  std::vector<Matrix> matrices;
  torch::manual_seed(1);
  for (const auto& [out, in] : shapes) {
    Matrix m{out, in, torch::randn({out, in}) * 0.05, torch::randn({out}) * 0.1, {}, {}};
    m.q.resize(out * in);
    m.scale.resize(out);
    kernels::QuantizeRows(m.weight.data_ptr<float>(), out, in, in, m.q.data(), m.scale.data());
    matrices.push_back(std::move(m));
  }
  return matrices;
}

double Seconds(const std::chrono::steady_clock::time_point& start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One token's products at `rows` rows, float32 through LibTorch.
void FloatToken(std::vector<Matrix>& matrices, const torch::Tensor& x,
                std::vector<torch::Tensor>& y) {
  for (size_t i = 0; i < matrices.size(); ++i) {
    const Matrix& m = matrices[i];
    const torch::Tensor input = x.narrow(1, 0, m.in);
    if (x.size(0) == 1) {
      torch::Tensor row = y[i].view({m.out});
      torch::addmv_out(row, m.bias, m.weight, input[0]);
    } else {
      torch::addmm_out(y[i], m.bias, input, m.weight.t());
    }
  }
}

void Int8Token(std::vector<Matrix>& matrices, const torch::Tensor& x,
               std::vector<torch::Tensor>& y) {
  for (size_t i = 0; i < matrices.size(); ++i) {
    const Matrix& m = matrices[i];
    kernels::Int8Gemm(x.data_ptr<float>(), x.size(0), x.size(1), m.q.data(), m.scale.data(), m.out,
                      m.in, m.bias.data_ptr<float>(), y[i].data_ptr<float>(), m.out);
  }
}

// Bytes per second a plain parallel read of `bytes` reaches (the median of
// `reps` passes over one buffer): what the weights' bytes are measured
// against. A buffer the size of a token's int8 or float32 weights stays in
// the caches between passes, as the weights do between decode steps; 256 MB
// does not.
double ReadBandwidth(int64_t bytes, int reps) {
  const torch::Tensor buffer = torch::rand({bytes / 4});
  std::vector<double> times;
  for (int rep = 0; rep < reps + 5; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    const float sum = buffer.sum().item<float>();  // LibTorch's vectorised parallel reduction
    if (rep >= 5) times.push_back(Seconds(start));
    if (std::isnan(sum)) std::abort();
  }
  return bytes / Median(times);
}

}  // namespace
}  // namespace attn

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int reps = absl::GetFlag(FLAGS_reps);
  const int threads = attn::ConfigureThreads(absl::GetFlag(FLAGS_threads));
  torch::NoGradGuard no_grad;
  auto matrices = attn::ModelMatrices();
  int64_t weights = 0, widest = 0;
  for (const auto& m : matrices) {
    weights += m.out * m.in;
    widest = std::max(widest, m.in);
  }
  std::printf(
      "threads %d, %d alternating repetitions per row count; %.2f MB float32, %.2f MB "
      "int8 (+ scales) per token; int8 loops: %s\n",
      threads, reps, weights * 4 / 1e6, weights / 1e6,
      attn::kernels::Int8GemmUsesAvx2() ? "AVX2" : "baseline");
  std::printf(
      "plain parallel read: %.1f GB/s over 1.9 MB, %.1f GB/s over 7.5 MB, %.1f GB/s over "
      "256 MB\n",
      attn::ReadBandwidth(weights, 400) / 1e9, attn::ReadBandwidth(4 * weights, 400) / 1e9,
      attn::ReadBandwidth(int64_t{256} << 20, 10) / 1e9);
  std::printf("%6s %14s %14s %8s %12s %12s\n", "rows", "float32 (us)", "int8 (us)", "ratio",
              "f32 GB/s", "int8 GB/s");
  for (int64_t rows : {1, 2, 4, 8, 16, 32, 48, 64}) {
    const torch::Tensor x = torch::randn({rows, widest});
    std::vector<torch::Tensor> y_float, y_int8;
    for (const auto& m : matrices) {
      y_float.push_back(torch::empty({rows, m.out}));
      y_int8.push_back(torch::empty({rows, m.out}));
    }
    std::vector<double> float_times, int8_times;
    for (int rep = 0; rep < reps + 20; ++rep) {  // the first 20 warm up
      auto start = std::chrono::steady_clock::now();
      attn::FloatToken(matrices, x, y_float);
      const double f = attn::Seconds(start);
      start = std::chrono::steady_clock::now();
      attn::Int8Token(matrices, x, y_int8);
      const double q = attn::Seconds(start);
      if (rep >= 20) {
        float_times.push_back(f);
        int8_times.push_back(q);
      }
    }
    const double f = attn::Median(float_times), q = attn::Median(int8_times);
    std::printf("%6ld %14.1f %14.1f %8.2f %12.1f %12.1f\n", static_cast<long>(rows), f * 1e6,
                q * 1e6, f / q, weights * 4 / f / 1e9, weights / q / 1e9);
  }
  return 0;
}
