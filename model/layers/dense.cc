#include "model/layers/dense.h"

#include <torch/torch.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "model/kernels/bf16_gemm.h"
#include "model/kernels/huge_pages.h"
#include "model/kernels/int8_gemm.h"
#include "model/kernels/packed_gemm.h"

namespace attn {
namespace {

using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

// Copies of weights in another layout, keyed by the weight's TensorImpl. An
// entry is used only while that tensor is alive, still points at the same
// memory and has not been written since the copy was made (its version
// counter), so training between evaluations or loading new weights never
// reads a stale copy.
template <typename Copy>
class WeightCopies {
 public:
  // Null when `weight` has no valid copy. Inference tensors keep no version
  // counter, so they never have one.
  std::shared_ptr<const Copy> Find(const torch::Tensor& weight) {
    if (size_.load(std::memory_order_acquire) == 0 || weight.is_inference()) return nullptr;
    const c10::TensorImpl* key = weight.unsafeGetTensorImpl();
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second.owner.expired() ||
        it->second.data != weight.data_ptr() || it->second.version != weight._version()) {
      return nullptr;
    }
    return it->second.copy;
  }

  void Insert(const torch::Tensor& weight, std::shared_ptr<const Copy> copy) {
    absl::MutexLock lock(&mu_);
    for (auto it = entries_.begin(); it != entries_.end();) {
      it = it->second.owner.expired() ? entries_.erase(it) : std::next(it);
    }
    entries_.insert_or_assign(weight.unsafeGetTensorImpl(),
                              Entry{WeakImpl(weight.getIntrusivePtr()), weight.data_ptr(),
                                    weight._version(), std::move(copy)});
    size_.store(entries_.size(), std::memory_order_release);
  }

 private:
  struct Entry {
    WeakImpl owner;
    const void* data;
    int64_t version;
    std::shared_ptr<const Copy> copy;
  };

  absl::Mutex mu_;
  std::unordered_map<const c10::TensorImpl*, Entry> entries_ ABSL_GUARDED_BY(mu_);
  // entries_.size(), read without the lock: a Dense call on a process that
  // quantised nothing costs one load.
  std::atomic<size_t> size_{0};
};

// On huge pages: at one row a step streams these from memory (huge_pages.h).
using PackedWeight = std::vector<float, kernels::HugePageAllocator<float>>;

// The weight in PackedGemm's panel layout, packed on first use.
std::shared_ptr<const PackedWeight> Packed(const torch::Tensor& weight) {
  static auto* packed = new WeightCopies<PackedWeight>();  // never destroyed: used until exit
  if (auto found = packed->Find(weight)) return found;
  const torch::Tensor w = weight.contiguous();
  auto copy = std::make_shared<PackedWeight>(kernels::PackedWeightSize(w.size(0), w.size(1)));
  kernels::PackWeight(w.data_ptr<float>(), w.size(0), w.size(1), w.size(1), copy->data());
  packed->Insert(weight, copy);
  return copy;
}

struct Int8Weight {
  kernels::Int8Panels panels;  // [out, in] in kernels::Int8Gemm's layout
  std::vector<float> scale;    // [out]
};

WeightCopies<Int8Weight>& Int8Weights() {
  static auto* copies = new WeightCopies<Int8Weight>();  // never destroyed: used until exit
  return *copies;
}

bool FloatOnCpu(const torch::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == torch::kFloat;
}

// Where the packed product beats OpenBLAS: from one row (OpenBLAS repacks
// the weight on every call, and at one row the kernel's own four-chain loop
// beats its matrix-vector product; docs/benchmarks-log.md, "Measurements
// behind the code") to any count in slices of kDensePackedMaxRows rows
// (PackedDense): at 256 to 1,024 rows of LFM2-350M's and RWKV-7 0.1B's
// products 1.95-2.05x OpenBLAS's rate on an AMD Zen 5 ("A prefill's
// products past 256 rows, packed in slices").
constexpr int64_t kPackedMinRows = 1;

// Whether the kernels' products can take these operands: float32 CPU
// tensors, x [..., in], weight [out, in], bias [out] contiguous or none.
// Shapes that do not fit go to LibTorch, whose error names them.
bool KernelOperands(const torch::Tensor& x, const torch::Tensor& weight,
                    const torch::Tensor& bias) {
  return FloatOnCpu(x) && FloatOnCpu(weight) && weight.dim() == 2 && weight.size(1) == x.size(-1) &&
         (!bias.defined() || (FloatOnCpu(bias) && bias.dim() == 1 && bias.is_contiguous() &&
                              bias.size(0) == weight.size(0)));
}

bool PackableOnCpu(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  // Inference tensors keep no version counter, so a later in-place write
  // could not be noticed: those weights take the ordinary path.
  return kernels::PackedGemmIsFast() && !weight.is_inference() && KernelOperands(x, weight, bias);
}

// y [..., out] = x [..., in] W^T + b through a kernel that takes row-major
// rows: `product(rows, y)` with x's rows flattened (unit column stride) and
// y [rows, out] to fill.
template <typename Product>
torch::Tensor RowProduct(const torch::Tensor& x, int64_t out, Product&& product) {
  torch::Tensor rows = x.reshape({-1, x.size(-1)});
  if (rows.stride(1) != 1) rows = rows.contiguous();
  torch::Tensor y = torch::empty({rows.size(0), out}, x.options());
  product(rows, y);
  auto sizes = x.sizes().vec();
  sizes.back() = out;
  return y.view(sizes);
}

const float* BiasData(const torch::Tensor& bias) {
  return bias.defined() ? bias.data_ptr<float>() : nullptr;
}

// More rows than kDensePackedMaxRows run in slices of that many, one after
// the other, each split across the threads: the kernel has no cache
// blocking of its own, and a slice's inputs stay in cache for every panel.
torch::Tensor PackedDense(const torch::Tensor& x, const torch::Tensor& weight,
                          const torch::Tensor& bias) {
  const int64_t in = weight.size(1), out = weight.size(0);
  const auto packed = Packed(weight);
  return RowProduct(x, out, [&](const torch::Tensor& rows, torch::Tensor& y) {
    const float* first = rows.data_ptr<float>();
    const int64_t total = rows.size(0), ldx = rows.stride(0);
    for (int64_t row = 0; row < total; row += kDensePackedMaxRows) {
      kernels::PackedGemm(first + row * ldx, std::min(kDensePackedMaxRows, total - row), ldx,
                          packed->data(), out, in, BiasData(bias), y.data_ptr<float>() + row * out,
                          out);
    }
  });
}

// Up to this many rows, where PackedGemm is not fast (no AVX2) and the
// call is not already one thread's share of a step, Dense multiplies row by
// row with OpenBLAS's matrix-vector product. Its multi-threaded matrix
// product (sgemm) costs 3-5x one row's matrix-vector product at 2 to 8 rows,
// so a few rows, each reading the weights again, are faster: decode steps of
// aft-decay at 2, 4 and 6 rows took 1.4, 2.3 and 3.2 times a one-row step
// this way against 3.6, 4.2 and 4.6 times through sgemm (AVX2 EPYC,
// interleaved runs; docs/benchmarks-log.md "Int8 weights").
constexpr int64_t kMatVecMaxRows = 6;

torch::Tensor MatVecRows(const torch::Tensor& x, const torch::Tensor& weight,
                         const torch::Tensor& bias) {
  return RowProduct(x, weight.size(0), [&](const torch::Tensor& rows, torch::Tensor& y) {
    for (int64_t r = 0; r < rows.size(0); ++r) {
      torch::Tensor out = y[r];
      if (bias.defined()) {
        torch::addmv_out(out, bias, weight, rows[r]);
      } else {
        torch::mv_out(out, weight, rows[r]);
      }
    }
  });
}

// The int8 product when `weight` has an int8 copy and the operands fit it,
// for every row count: each row's result then depends on that row alone,
// so a prompt's prefill and its decode steps round their activations alike
// and Score agrees with a stream. Undefined otherwise.
torch::Tensor Int8Dense(const torch::Tensor& x, const torch::Tensor& weight,
                        const torch::Tensor& bias) {
  if (!KernelOperands(x, weight, bias) || weight.size(1) > kernels::kInt8MaxIn) return {};
  const auto copy = Int8Weights().Find(weight);
  if (copy == nullptr) return {};
  const int64_t in = weight.size(1), out = weight.size(0);
  return RowProduct(x, out, [&](const torch::Tensor& flat, torch::Tensor& y) {
    kernels::Int8Gemm(flat.data_ptr<float>(), flat.size(0), flat.stride(0), copy->panels,
                      copy->scale.data(), out, in, BiasData(bias), y.data_ptr<float>(), out);
  });
}

// Bytes of an int8 copy of an [out, in] weight: the values and the scales.
int64_t Int8Bytes(int64_t out, int64_t in) {
  return out * in + out * static_cast<int64_t>(sizeof(float));
}

// Installs q [out, in] (row-major) and scale [out] as the int8 copy of
// `weight` after writing their dequantised values into `weight`.
int64_t InstallInt8Copy(const torch::Tensor& weight, const int8_t* q, std::vector<float> scale) {
  const int64_t out = weight.size(0), in = weight.size(1);
  auto copy = std::make_shared<Int8Weight>();
  copy->panels = kernels::PackInt8Panels(q, out, in);
  copy->scale = std::move(scale);
  {
    torch::NoGradGuard no_grad;
    auto values = torch::from_blob(const_cast<int8_t*>(q), {out, in}, torch::kChar);
    auto scales = torch::from_blob(copy->scale.data(), {out, 1}, torch::kFloat);
    // In place, which moves the version counter: packed float copies of the
    // old values are dropped, and the int8 copy records the new version.
    weight.copy_(values.to(torch::kFloat) * scales);
  }
  Int8Weights().Insert(weight, std::move(copy));
  return Int8Bytes(out, in);
}

// Int8 copies feed the CPU's kernels only.
void CheckQuantizable(const torch::Tensor& weight) {
  TORCH_CHECK(FloatOnCpu(weight) && weight.dim() == 2 && !weight.is_inference(),
              "int8 quantisation needs a float32 CPU matrix, got ", weight.scalar_type(), " ",
              weight.sizes(), " on ", weight.device());
}

struct Bf16Weight {
  kernels::Bf16Panels panels;  // [out, in] in kernels::Bf16Gemm's layout, or
  torch::Tensor values;        // bf16 [out, in] for LibTorch's product
};

WeightCopies<Bf16Weight>& Bf16Weights() {
  static auto* copies = new WeightCopies<Bf16Weight>();  // never destroyed: used until exit
  return *copies;
}

// Dense for weights without an int8 or bf16 copy.
torch::Tensor FloatDense(const torch::Tensor& x, const torch::Tensor& weight,
                         const torch::Tensor& bias) {
  const int64_t rows = x.numel() / x.size(-1);
  if (rows >= kPackedMinRows && PackableOnCpu(x, weight, bias)) {
    return PackedDense(x, weight, bias);
  }
  if (rows != 1) {
    if (rows <= kMatVecMaxRows && !at::in_parallel_region() && KernelOperands(x, weight, bias)) {
      return MatVecRows(x, weight, bias);
    }
    return torch::nn::functional::linear(x, weight, bias);
  }
  auto sizes = x.sizes().vec();
  sizes.back() = weight.size(0);
  auto row = x.reshape({x.size(-1)});
  auto y = bias.defined() ? torch::addmv(bias, weight, row) : torch::mv(weight, row);
  return y.view(sizes);
}

// Up to this many rows a CPU whose bf16 path does not run every row count
// (kernels::Bf16GemmRunsEveryRowCount) multiplies a weight's bf16 copy:
// there the step reads weights from memory, and bf16 halves the bytes. At
// more rows the product is bound by arithmetic, and the packed float product
// multiplies the rounded activations instead.
constexpr int64_t kBf16Avx2MaxRows = 6;

// LibTorch's bf16 product (Bf16Product::kLibTorch): bf16 outputs widened,
// then the float32 bias.
torch::Tensor LibTorchBf16Dense(const torch::Tensor& x, const torch::Tensor& values,
                                const torch::Tensor& bias) {
  torch::Tensor y = torch::nn::functional::linear(x.to(torch::kBFloat16), values).to(torch::kFloat);
  if (bias.defined()) y.add_(bias);
  return y;
}

// The bf16 product when `weight` has a bf16 copy (dense.h); undefined
// otherwise.
torch::Tensor Bf16Dense(const torch::Tensor& x, const torch::Tensor& weight,
                        const torch::Tensor& bias) {
  if (x.scalar_type() != torch::kFloat) return {};
  const auto copy = Bf16Weights().Find(weight);
  if (copy == nullptr) return {};
  if (copy->values.defined()) return LibTorchBf16Dense(x, copy->values, bias);
  if (!KernelOperands(x, weight, bias)) return {};
  const int64_t rows = x.numel() / x.size(-1);
  if (rows > kBf16Avx2MaxRows && !kernels::Bf16GemmRunsEveryRowCount()) {
    // The same function but for the order of the sums: both operands
    // rounded to bf16 (to nearest, ties to even, as RoundToBf16).
    return FloatDense(x.to(torch::kBFloat16).to(torch::kFloat), weight, bias);
  }
  const int64_t in = weight.size(1), out = weight.size(0);
  return RowProduct(x, out, [&](const torch::Tensor& flat, torch::Tensor& y) {
    kernels::Bf16Gemm(flat.data_ptr<float>(), flat.size(0), flat.stride(0), copy->panels, out, in,
                      BiasData(bias), y.data_ptr<float>(), out);
  });
}

// Writes the rounded values into `weight` and installs `copy`: in place,
// which moves the version counter, so copies of the old values are dropped
// and the bf16 copy records the new version.
void InstallBf16Copy(const torch::Tensor& weight, const torch::Tensor& rounded,
                     std::shared_ptr<Bf16Weight> copy) {
  {
    torch::NoGradGuard no_grad;
    weight.copy_(rounded);
  }
  Bf16Weights().Insert(weight, std::move(copy));
}

// The copy for LibTorch's product: LibTorch rounds float32 to bf16 to
// nearest, ties to even, as kernels::RoundToBf16 does.
void QuantizeForLibTorch(const torch::Tensor& weight) {
  torch::NoGradGuard no_grad;
  torch::Tensor values = weight.detach().to(torch::kBFloat16).contiguous();
  const torch::Tensor bad = torch::isfinite(values).logical_not();
  if (bad.any().item<bool>()) {
    const torch::Tensor at = bad.nonzero()[0].cpu();
    const int64_t o = at[0].item<int64_t>(), i = at[1].item<int64_t>();
    TORCH_CHECK(false, "bf16 quantisation needs finite weights within bf16's range; value ",
                weight[o][i].item<float>(), " at [", o, ", ", i, "]");
  }
  auto copy = std::make_shared<Bf16Weight>();
  copy->values = values;
  InstallBf16Copy(weight, values.to(torch::kFloat), std::move(copy));
}

}  // namespace

int64_t QuantizeWeightInt8(const torch::Tensor& weight) {
  CheckQuantizable(weight);
  const int64_t out = weight.size(0), in = weight.size(1);
  // Quantising the dequantised values again could move a value by a
  // rounding step: a valid copy stays.
  if (HasInt8Copy(weight)) return Int8Bytes(out, in);
  TORCH_CHECK(torch::isfinite(weight).all().item<bool>(), "int8 quantisation needs finite weights");
  const torch::Tensor w = weight.detach().contiguous();
  std::vector<int8_t> q(out * in);
  std::vector<float> scale(out);
  kernels::QuantizeRows(w.data_ptr<float>(), out, in, in, q.data(), scale.data());
  return InstallInt8Copy(weight, q.data(), std::move(scale));
}

int64_t SetInt8Copy(const torch::Tensor& weight, const Int8Matrix& matrix) {
  CheckQuantizable(weight);
  const int64_t out = weight.size(0), in = weight.size(1);
  TORCH_CHECK(matrix.values.scalar_type() == torch::kChar && matrix.values.dim() == 2 &&
                  matrix.values.size(0) == out && matrix.values.size(1) == in,
              "int8 values must be int8 ", weight.sizes(), ", got ", matrix.values.scalar_type(),
              " ", matrix.values.sizes());
  TORCH_CHECK(matrix.scales.scalar_type() == torch::kFloat && matrix.scales.dim() == 1 &&
                  matrix.scales.size(0) == out,
              "int8 scales must be float [", out, "], got ", matrix.scales.scalar_type(), " ",
              matrix.scales.sizes());
  TORCH_CHECK(
      torch::isfinite(matrix.scales).all().item<bool>() && (matrix.scales >= 0).all().item<bool>(),
      "int8 scales must be finite and not negative");
  const torch::Tensor values = matrix.values.to(torch::kCPU).contiguous();
  const torch::Tensor scales = matrix.scales.to(torch::kCPU).contiguous();
  const float* scale_data = scales.data_ptr<float>();
  return InstallInt8Copy(weight, values.data_ptr<int8_t>(),
                         std::vector<float>(scale_data, scale_data + out));
}

std::optional<Int8Matrix> Int8CopyOf(const torch::Tensor& weight) {
  const auto copy = Int8Weights().Find(weight);
  if (copy == nullptr) return std::nullopt;
  const int64_t out = weight.size(0), in = weight.size(1);
  torch::Tensor values = torch::empty({out, in}, torch::kChar);
  kernels::UnpackInt8Panels(copy->panels, out, in, values.data_ptr<int8_t>());
  return Int8Matrix{
      values,
      torch::from_blob(const_cast<float*>(copy->scale.data()), {out}, torch::kFloat).clone()};
}

bool HasInt8Copy(const torch::Tensor& weight) { return Int8Weights().Find(weight) != nullptr; }

int64_t QuantizeWeightBf16(const torch::Tensor& weight, Bf16Product product) {
  // A weight that kept its copy (DropFloatValues may have made it bf16).
  if (HasBf16Copy(weight)) return weight.numel() * static_cast<int64_t>(sizeof(uint16_t));
  TORCH_CHECK(weight.scalar_type() == torch::kFloat && weight.dim() == 2 && !weight.is_inference(),
              "bf16 quantisation needs a float32 matrix, got ", weight.scalar_type(), " ",
              weight.sizes(), " on ", weight.device());
  const int64_t out = weight.size(0), in = weight.size(1);
  const int64_t bytes = out * in * static_cast<int64_t>(sizeof(uint16_t));
  if (product == Bf16Product::kLibTorch || !weight.is_cpu()) {
    QuantizeForLibTorch(weight);
    return bytes;
  }
  const torch::Tensor w = weight.detach().contiguous();
  const float* values = w.data_ptr<float>();
  std::vector<uint16_t> rounded(out * in);
  std::vector<float> widened(out * in);
  for (int64_t i = 0; i < out * in; ++i) {
    rounded[i] = kernels::RoundToBf16(values[i]);
    widened[i] = kernels::Bf16ToFloat(rounded[i]);
    TORCH_CHECK(std::isfinite(widened[i]), "bf16 quantisation needs finite ",
                "weights within bf16's range; value ", values[i], " at [", i / in, ", ", i % in,
                "]");
  }
  auto copy = std::make_shared<Bf16Weight>();
  copy->panels = kernels::PackBf16Panels(rounded.data(), out, in);
  InstallBf16Copy(weight, torch::from_blob(widened.data(), {out, in}, torch::kFloat),
                  std::move(copy));
  return bytes;
}

int64_t DropFloatValues(const torch::Tensor& weight) {
  const auto copy = Bf16Weights().Find(weight);
  TORCH_CHECK(copy != nullptr && copy->values.defined(),
              "only a weight with a bf16 copy for LibTorch's product can drop its float32 values");
  if (weight.scalar_type() != torch::kFloat) return 0;  // dropped before
  const int64_t freed = weight.numel() * weight.element_size();
  {
    torch::NoGradGuard no_grad;
    weight.set_data(copy->values);  // the same parameter, now the copy's storage
  }
  Bf16Weights().Insert(weight, copy);  // its new address and version
  return freed;
}

bool HasBf16Copy(const torch::Tensor& weight) { return Bf16Weights().Find(weight) != nullptr; }

torch::Tensor DenseLeadingColumnsForLast(const torch::Tensor& x, const torch::nn::Linear& layer,
                                         int64_t leading, int64_t keep) {
  const torch::Tensor& weight = layer->weight;
  const torch::Tensor& bias = layer->bias;
  const bool packable = !torch::GradMode::is_enabled() && x.dim() == 3 && x.is_contiguous() &&
                        x.size(0) * x.size(1) <= kDensePackedMaxRows &&
                        PackableOnCpu(x, weight, bias);
  const int64_t batch = x.dim() == 3 ? x.size(0) : 0, chunk = x.dim() == 3 ? x.size(1) : 0;
  const int64_t in = weight.size(1), out = weight.size(0);
  if (!packable || HasInt8Copy(weight) || HasBf16Copy(weight) || keep >= chunk || leading <= 0 ||
      leading >= out || leading % kernels::kPanelWidth != 0) {
    return Dense(x, weight, bias);
  }
  const auto packed = Packed(weight);
  const float* trailing_weights =
      packed->data() + leading / kernels::kPanelWidth * in * kernels::kPanelWidth;
  const float* bias_data = BiasData(bias);
  const float* x_data = x.data_ptr<float>();
  torch::Tensor y = torch::empty({batch, chunk, out}, x.options());
  float* y_data = y.data_ptr<float>();
  // The trailing columns (keys and values) of every token in one product;
  // the leading panels (queries) come first in the packed weight, so the
  // kept tokens of each sequence multiply them alone.
  kernels::PackedGemm(x_data, batch * chunk, in, trailing_weights, out - leading, in,
                      bias_data == nullptr ? nullptr : bias_data + leading, y_data + leading, out);
  for (int64_t sequence = 0; sequence < batch; ++sequence) {
    const int64_t first_kept = sequence * chunk + chunk - keep;
    kernels::PackedGemm(x_data + first_kept * in, keep, in, packed->data(), leading, in, bias_data,
                        y_data + first_kept * out, out);
  }
  return y;
}

torch::Tensor Dense(const torch::Tensor& x, const torch::Tensor& weight,
                    const torch::Tensor& bias) {
  const bool tracked =
      torch::GradMode::is_enabled() &&
      (x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad()));
  if (tracked || x.dim() < 1 || x.size(-1) == 0) {
    return torch::nn::functional::linear(x, weight, bias);
  }
  if (torch::Tensor y = Int8Dense(x, weight, bias); y.defined()) return y;
  if (torch::Tensor y = Bf16Dense(x, weight, bias); y.defined()) return y;
  return FloatDense(x, weight, bias);
}

}  // namespace attn
