// CudaGraphCapturer with LibTorch's CUDA graphs (a GPU build).
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <utility>

#include "model/backend/step_graphs.h"

namespace attn {
namespace {

using at::cuda::CUDAGraph;
using MempoolId = decltype(std::declval<CUDAGraph&>().pool());

class CudaGraphStep : public CapturedStep {
 public:
  void Replay() override { graph_.replay(); }
  const torch::Tensor& logits() const override { return logits_; }

  // Captures `step` on `stream` into memory shared with `share`'s.
  void Capture(const std::function<torch::Tensor()>& step, CudaGraphStep* share,
               const c10::cuda::CUDAStream& stream) {
    const c10::cuda::CUDAStreamGuard on_stream(stream);
    const MempoolId pool = share != nullptr ? share->pool_ : MempoolId{0, 0};
#if TORCH_VERSION_MAJOR >= 2
    // Only this thread's work: other engines' threads go on meanwhile.
    graph_.capture_begin(pool, cudaStreamCaptureModeThreadLocal);
#else
    graph_.capture_begin(pool);
#endif
    std::string error;
    try {
      logits_ = step();
    } catch (const c10::Error& e) {
      error = e.what_without_backtrace();
    } catch (const std::exception& e) {
      error = e.what();
    }
    // Ends the capture even after a failure, which leaves the stream
    // capturing otherwise; the step's error is the one worth reporting.
    try {
      graph_.capture_end();
    } catch (const c10::Error& e) {
      if (error.empty()) error = e.what_without_backtrace();
    }
    TORCH_CHECK(error.empty(), error);
    pool_ = graph_.pool();
  }

 private:
  CUDAGraph graph_;
  MempoolId pool_{0, 0};
  torch::Tensor logits_;
};

}  // namespace

bool step_graphs_internal::GraphsBuilt() { return true; }

StepCapturer CudaGraphCapturer(torch::Device device) {
  return [device](const std::function<torch::Tensor()>& step, CapturedStep* share,
                  std::string* error) -> std::unique_ptr<CapturedStep> {
    const c10::cuda::CUDAGuard on_device(device.index());
    // A stream of its own: CUDA cannot capture the legacy default stream.
    const c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool(false, device.index());
    auto graph = std::make_unique<CudaGraphStep>();
    try {
      graph->Capture(step, static_cast<CudaGraphStep*>(share), stream);
    } catch (const c10::Error& e) {
      *error = e.what_without_backtrace();
      // The runtime keeps a failed capture's error for the next call that
      // asks: the eager steps' kernel launches would report it as theirs.
      (void)cudaGetLastError();
      return nullptr;
    }
    return graph;
  };
}

}  // namespace attn
