#include "model/layers/dense.h"

#include <torch/torch.h>

#include <memory>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "model/kernels/packed_gemm.h"

namespace attn {
namespace {

using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

// Packed copies of the weights Dense has multiplied, keyed by the weight's
// TensorImpl. An entry is used only while that tensor is alive, still points
// at the same memory and has not been written since it was packed (its
// version counter), so training between evaluations or loading new weights
// repacks instead of reading stale values.
class PackedWeights {
 public:
  std::shared_ptr<const std::vector<float>> Get(const torch::Tensor& weight) {
    const c10::TensorImpl* key = weight.unsafeGetTensorImpl();
    const int64_t version = weight._version();
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it != entries_.end() && !it->second.owner.expired() &&
        it->second.data == weight.data_ptr() && it->second.version == version) {
      return it->second.packed;
    }
    DropDeadEntries();
    const torch::Tensor w = weight.contiguous();
    auto packed =
        std::make_shared<std::vector<float>>(kernels::PackedWeightSize(w.size(0), w.size(1)));
    kernels::PackWeight(w.data_ptr<float>(), w.size(0), w.size(1), w.size(1), packed->data());
    entries_.insert_or_assign(
        key, Entry{WeakImpl(weight.getIntrusivePtr()), weight.data_ptr(), version, packed});
    return packed;
  }

 private:
  struct Entry {
    WeakImpl owner;
    const void* data;
    int64_t version;
    std::shared_ptr<const std::vector<float>> packed;
  };

  void DropDeadEntries() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto it = entries_.begin(); it != entries_.end();) {
      it = it->second.owner.expired() ? entries_.erase(it) : std::next(it);
    }
  }

  absl::Mutex mu_;
  std::unordered_map<const c10::TensorImpl*, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

PackedWeights& SharedPackedWeights() {
  static auto* weights = new PackedWeights();  // never destroyed: used until exit
  return *weights;
}

// Where the packed product beats OpenBLAS: from one row up to a prefill
// chunk, since OpenBLAS repacks the weight on every call (and at one row the
// kernel's own four-chain loop beats its matrix-vector product). Above a
// chunk OpenBLAS's cache blocking, which this kernel lacks, starts to
// matter. docs/benchmarks.md ("Measurements behind the code") has the
// numbers.
constexpr int64_t kPackedMinRows = 1;
constexpr int64_t kPackedMaxRows = 256;

bool PackableOnCpu(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  auto cpu_float = [](const torch::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == torch::kFloat;
  };
  // Inference tensors keep no version counter, so a later in-place write
  // could not be noticed: those weights take the ordinary path.
  // Shapes that do not fit go to LibTorch, whose error names them.
  return kernels::PackedGemmIsFast() && cpu_float(x) && cpu_float(weight) && weight.dim() == 2 &&
         !weight.is_inference() && weight.size(1) == x.size(-1) &&
         (!bias.defined() || (cpu_float(bias) && bias.dim() == 1 && bias.is_contiguous() &&
                              bias.size(0) == weight.size(0)));
}

torch::Tensor PackedDense(const torch::Tensor& x, const torch::Tensor& weight,
                          const torch::Tensor& bias) {
  const int64_t in = weight.size(1), out = weight.size(0);
  torch::Tensor rows = x.reshape({-1, in});
  if (rows.stride(1) != 1) rows = rows.contiguous();
  const auto packed = SharedPackedWeights().Get(weight);
  torch::Tensor y = torch::empty({rows.size(0), out}, x.options());
  kernels::PackedGemm(rows.data_ptr<float>(), rows.size(0), rows.stride(0), packed->data(), out, in,
                      bias.defined() ? bias.data_ptr<float>() : nullptr, y.data_ptr<float>(), out);
  auto sizes = x.sizes().vec();
  sizes.back() = out;
  return y.view(sizes);
}

}  // namespace

torch::Tensor DenseLeadingColumnsForLast(const torch::Tensor& x, const torch::nn::Linear& layer,
                                         int64_t leading, int64_t keep) {
  const torch::Tensor& weight = layer->weight;
  const torch::Tensor& bias = layer->bias;
  const bool packable = !torch::GradMode::is_enabled() && x.dim() == 3 && x.is_contiguous() &&
                        x.size(0) * x.size(1) <= kPackedMaxRows && PackableOnCpu(x, weight, bias);
  const int64_t batch = x.dim() == 3 ? x.size(0) : 0, chunk = x.dim() == 3 ? x.size(1) : 0;
  const int64_t in = weight.size(1), out = weight.size(0);
  if (!packable || keep >= chunk || leading <= 0 || leading >= out ||
      leading % kernels::kPanelWidth != 0) {
    return Dense(x, weight, bias);
  }
  const auto packed = SharedPackedWeights().Get(weight);
  const float* trailing_weights =
      packed->data() + leading / kernels::kPanelWidth * in * kernels::kPanelWidth;
  const float* bias_data = bias.defined() ? bias.data_ptr<float>() : nullptr;
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
  const int64_t rows = x.numel() / x.size(-1);
  if (rows >= kPackedMinRows && rows <= kPackedMaxRows && PackableOnCpu(x, weight, bias)) {
    return PackedDense(x, weight, bias);
  }
  if (rows != 1) return torch::nn::functional::linear(x, weight, bias);
  auto sizes = x.sizes().vec();
  sizes.back() = weight.size(0);
  auto row = x.reshape({x.size(-1)});
  auto y = bias.defined() ? torch::addmv(bias, weight, row) : torch::mv(weight, row);
  return y.view(sizes);
}

}  // namespace attn
