#include "model/lm/block.h"

#include <torch/torch.h>

#include <optional>

#include "model/layers/feed_forward.h"
#include "model/layers/mixture_of_experts.h"
#include "model/layers/norms.h"
#include "model/lm/row_groups.h"
#include "model/mixers/gpu_experts.h"

namespace attn {
namespace {

// What a layer adds after its mixer: FF(Norm(y)), plus the experts' output
// where the model has them. Children "ff_norm", "ff" and "moe".
class FeedForwardHalf {
 public:
  FeedForwardHalf(torch::nn::Module& block, const LmConfig& config) {
    norm_ = block.register_module("ff_norm", Norm(config.norm, config.d_model, config.norm_eps));
    ff_ = block.register_module("ff", FeedForward(config.d_model, config.ff_hidden, config.ff));
    if (config.moe.experts > 0) {
      moe_ = block.register_module("moe", MixtureOfExperts(config.d_model, config.moe.hidden,
                                                           config.moe.experts, config.moe.top_k));
    }
  }

  // y + FF(Norm(y)) with y = h + mixed (y = h when `mixed` is undefined).
  // Its rows are independent, so with `row_groups` a prefill chunk's run in
  // one parallel region, a group of rows per thread, instead of a fork for
  // each of its operations (inside a grouped step there is no thread to
  // spare for it). Without, each product is split across the threads.
  torch::Tensor AddTo(const torch::Tensor& h, const torch::Tensor& mixed, bool row_groups) {
    const int64_t d = h.size(-1), rows = h.numel() / d;
    const int64_t groups = row_groups ? RowGroups(rows, h) : 1;
    if (groups == 1) {
      const torch::Tensor y = mixed.defined() ? h + mixed : h;
      return y + (*this)(y);
    }
    const torch::Tensor h_rows = h.reshape({rows, d});
    const torch::Tensor mixed_rows = mixed.defined() ? mixed.reshape({rows, d}) : mixed;
    // Each group writes its rows of the result in place: gathering groups'
    // own tensors afterwards would be a serial copy of the chunk.
    torch::Tensor out = torch::empty({rows, d}, h.options());
    ForEachRowGroup(rows, groups, [&](int64_t, int64_t first, int64_t count) {
      torch::Tensor y = out.narrow(0, first, count);
      if (mixed_rows.defined()) {
        torch::add_out(y, h_rows.narrow(0, first, count), mixed_rows.narrow(0, first, count));
      } else {
        y.copy_(h_rows.narrow(0, first, count));
      }
      y.add_((*this)(y));
    });
    return out.view(h.sizes());
  }

 private:
  torch::Tensor operator()(const torch::Tensor& y) {
    const torch::Tensor normed = norm_->forward(y);
    torch::Tensor out = ff_->forward(normed);
    if (!moe_.is_empty()) out.add_(RunExperts(*moe_, normed));
    return out;
  }

  Norm norm_{nullptr};
  FeedForward ff_{nullptr};
  MixtureOfExperts moe_{nullptr};
};

class MixerBlock : public Block {
 public:
  MixerBlock(const LmConfig& config, const MixerOptions& options) {
    mix_norm_ = register_module("mix_norm", Norm(config.norm, config.d_model, config.norm_eps));
    mixer_ = register_module("mixer", MakeMixer(options));
    ff_.emplace(*this, config);
  }

  torch::Tensor Forward(const torch::Tensor& h, LayerCarry& /*carry*/) override {
    return ff_->AddTo(h, mixer_->forward(mix_norm_->forward(h)), row_groups_);
  }

  // The mixer sees every position; the residual and the feed-forward run
  // on the `keep` wanted.
  torch::Tensor Prefill(const torch::Tensor& h, MixerState& state, const torch::Tensor& rows,
                        int64_t keep, LayerCarry& /*carry*/) override {
    torch::Tensor mixed = mixer_->prefill_last(mix_norm_->forward(h), state, rows, keep);
    if (keep == 0) return mixed;
    return ff_->AddTo(h.narrow(1, h.size(1) - keep, keep), mixed, row_groups_);
  }

  torch::Tensor Step(const torch::Tensor& h, MixerState& state, const torch::Tensor& slots,
                     LayerCarry& /*carry*/) override {
    return ff_->AddTo(h, mixer_->step(mix_norm_->forward(h), state, slots), row_groups_);
  }

  const SequenceMixer& mixer() const override { return *mixer_; }

 private:
  Norm mix_norm_{nullptr};
  std::shared_ptr<SequenceMixer> mixer_;
  std::optional<FeedForwardHalf> ff_;
};

// A whole block, and with config.whole_block_ff a feed-forward after it:
// y = B(h), then y + FF(Norm(y)).
class WholeBlock : public Block {
 public:
  WholeBlock(const LmConfig& config, const MixerOptions& options) {
    std::shared_ptr<SequenceMixer> made = MakeMixer(options);
    block_ = std::dynamic_pointer_cast<WholeBlockMixer>(made);
    TORCH_CHECK(block_ != nullptr, MixerKindName(options.kind), " is not a whole block");
    register_module("mixer", made);
    if (config.whole_block_ff) ff_.emplace(*this, config);
  }

  torch::Tensor Forward(const torch::Tensor& h, LayerCarry& carry) override {
    return AddFeedForward(block_->ForwardWithCarry(h, carry));
  }
  torch::Tensor Prefill(const torch::Tensor& h, MixerState& state, const torch::Tensor& rows,
                        int64_t keep, LayerCarry& carry) override {
    return AddFeedForward(block_->PrefillWithCarry(h, state, rows, keep, carry));
  }
  torch::Tensor Step(const torch::Tensor& h, MixerState& state, const torch::Tensor& slots,
                     LayerCarry& carry) override {
    return AddFeedForward(block_->StepWithCarry(h, state, slots, carry));
  }
  const SequenceMixer& mixer() const override { return *block_; }

 private:
  torch::Tensor AddFeedForward(const torch::Tensor& y) {
    if (!ff_ || y.numel() == 0) return y;
    return ff_->AddTo(y, torch::Tensor(), row_groups_);
  }

  std::shared_ptr<WholeBlockMixer> block_;
  std::optional<FeedForwardHalf> ff_;
};

}  // namespace

std::shared_ptr<Block> MakeBlock(const LmConfig& config, int64_t index) {
  MixerOptions options = config.mixer_options();
  options.layer = index;
  options.kind = config.layer_mixer(index);
  if (options.kind == MixerKind::kGqa) options.heads = config.gqa_heads();
  if (IsWholeBlock(options.kind)) return std::make_shared<WholeBlock>(config, options);
  return std::make_shared<MixerBlock>(config, options);
}

}  // namespace attn
