#include "model/mixers/whole_block.h"

#include <torch/torch.h>

namespace attn {

torch::Tensor WholeBlockMixer::forward(const torch::Tensor& x) {
  LayerCarry alone;  // a block used alone is its own first layer
  return ForwardWithCarry(x, alone);
}

torch::Tensor WholeBlockMixer::ForwardWithCarry(const torch::Tensor& x, LayerCarry& carry) {
  TORCH_CHECK(x.dim() == 3 && x.size(2) == options_.d_model, "forward expects x [B, T, ",
              options_.d_model, "], got ", x.sizes());
  // Empty sequences in x's dtype (a float64 reference runs in float64).
  MixerState state = initial_state(x.size(0), x.device());
  for (auto& t : state.tensors) t = t.to(x.options());
  BlockRows rows;
  rows.tensors = state.tensors;
  rows.access = CanFuse(x, state) ? RowAccess::kFusedCpu : RowAccess::kGathered;
  return Run(rows.fused() ? x.contiguous() : x, rows, x.size(1), carry);
}

torch::Tensor WholeBlockMixer::Prefill(const torch::Tensor& x, MixerState& state,
                                       const torch::Tensor& slots, int64_t keep) {
  LayerCarry alone;
  return Continue(x, state, slots, keep, alone);
}

torch::Tensor WholeBlockMixer::PrefillWithCarry(const torch::Tensor& x, MixerState& state,
                                                const torch::Tensor& slots, int64_t keep,
                                                LayerCarry& carry) {
  TORCH_CHECK(x.dim() == 3 && x.size(2) == options_.d_model, "prefill expects x [B, C, ",
              options_.d_model, "], got ", x.sizes());
  TORCH_CHECK(keep >= 0 && keep <= x.size(1), "prefill_last keeps 0 to ", x.size(1),
              " outputs, got ", keep);
  return Continue(x, state, slots, keep, carry);
}

torch::Tensor WholeBlockMixer::Continue(const torch::Tensor& x, MixerState& state,
                                        const torch::Tensor& slots, int64_t keep,
                                        LayerCarry& carry) {
  torch::Tensor out;
  RowAccess access = RowAccess::kGathered;
  if (CanFuse(x, state)) {
    access = RowAccess::kFusedCpu;
  } else if (x.size(1) == 1 && keep == 1 && StepsPoolRowsOnGpu(x, state)) {
    access = RowAccess::kGpuStep;
  }
  const bool contiguous = access == RowAccess::kFusedCpu;
  ContinueRows(state, slots, x.size(0), x.size(1), access, [&](BlockRows& rows) {
    out = Run(contiguous ? x.contiguous() : x, rows, keep, carry);
  });
  return out;
}

void WholeBlockMixer::ContinueRows(MixerState& state, const torch::Tensor& slots, int64_t batch,
                                   int64_t tokens, RowAccess access,
                                   const std::function<void(BlockRows&)>& run) const {
  const torch::Tensor ids = ResolveSlots(state, slots, batch);  // CPU int64, alive below
  const auto index = RowsOn(ids, state.length.device());
  BlockRows rows;
  rows.access = access;
  auto in_place = [&](size_t i) { return access != RowAccess::kGathered && InPlaceWhenFused(i); };
  for (size_t i = 0; i < state.tensors.size(); ++i) {
    if (in_place(i)) {
      rows.tensors.push_back(state.tensors[i]);  // updated in place, row by row
      rows.ids = ids.data_ptr<int64_t>();
      if (rows.gpu_step()) rows.device_ids = index;
    } else {
      rows.tensors.push_back(state.tensors[i].index_select(0, index));
    }
  }
  run(rows);
  for (size_t i = 0; i < state.tensors.size(); ++i) {
    if (!in_place(i)) state.tensors[i].index_copy_(0, index, rows.tensors[i]);
  }
  AdvanceRows(state, index, tokens);
}

torch::Tensor WholeBlockMixer::step(const torch::Tensor& x, MixerState& state,
                                    const torch::Tensor& slots) {
  LayerCarry alone;
  return StepWithCarry(x, state, slots, alone);
}

torch::Tensor WholeBlockMixer::StepWithCarry(const torch::Tensor& x, MixerState& state,
                                             const torch::Tensor& slots, LayerCarry& carry) {
  TORCH_CHECK(x.dim() == 2 && x.size(1) == options_.d_model, "step expects x [B, ",
              options_.d_model, "], got ", x.sizes());
  // A step is a chunk of one token: the recurrences have no positions. The
  // carry takes the chunk's shape on the way in and the step's on the way
  // out.
  LayerCarry chunk;
  if (carry.first_values.defined()) chunk.first_values = carry.first_values.unsqueeze(1);
  torch::Tensor y = Continue(x.unsqueeze(1), state, slots, 1, chunk);
  if (chunk.first_values.defined()) carry.first_values = chunk.first_values.squeeze(1);
  return y.squeeze(1);
}

}  // namespace attn
