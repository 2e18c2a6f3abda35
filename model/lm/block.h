// One layer of a language model: it maps the residual stream h to the next
// one in the three forms a model computes (model/lm/language_model.h), with
// the state its mixer keeps. Two kinds implement it:
//
//   MixerBlock  h + Mixer(Norm(h)), then + FF(Norm(.)): any SequenceMixer
//               (AFT, linear, attention, ...) with a feed-forward;
//   WholeBlock  a WholeBlockMixer (model/mixers/whole_block.h: RWKV-7,
//               RWKV-4, Mamba-2) is the layer, norms and residuals
//               included; with LmConfig::whole_block_ff a feed-forward
//               half follows it (Granite 4.0-H's Mamba layers).
//
// The model runs every layer through this interface alone, so a new kind of
// layer (a hybrid's convolution or attention layer) is a mixer or a whole
// block, and MakeBlock's choice. The layers of a stack hand each other a
// LayerCarry; a MixerBlock passes it on untouched.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>

#include "model/lm/config.h"
#include "model/mixers/mixer.h"
#include "model/mixers/whole_block.h"

namespace attn {

class Block : public torch::nn::Module {
 public:
  ~Block() override = default;

  // The parallel form over h [B, T, d].
  virtual torch::Tensor Forward(const torch::Tensor& h, LayerCarry& carry) = 0;
  // A chunk h [B, C, d] continuing rows `rows` of `state`, which advance by
  // C; the outputs of the last `keep` positions [B, keep, d] (0 <= keep <=
  // C: a layer below the last wants all C, the last one position or none).
  virtual torch::Tensor Prefill(const torch::Tensor& h, MixerState& state,
                                const torch::Tensor& rows, int64_t keep, LayerCarry& carry) = 0;
  // One token per row, h [B, d]; the rows may be at different lengths.
  virtual torch::Tensor Step(const torch::Tensor& h, MixerState& state, const torch::Tensor& slots,
                             LayerCarry& carry) = 0;
  // The mixer whose state the layer keeps: the state's layout, reset,
  // release, copies and limits.
  virtual const SequenceMixer& mixer() const = 0;

  // Whether the feed-forward half splits its rows into one group per thread
  // (model/lm/row_groups.h): the model decides from the size of its
  // weights. When it does not, each of a chunk's products is split across
  // the threads.
  void set_row_groups(bool on) { row_groups_ = on; }

 protected:
  bool row_groups_ = true;
};

// Layer `index` of a model of `config`: a WholeBlock for a whole-block kind
// (IsWholeBlock), else a MixerBlock; a gqa layer has config.gqa_heads()
// heads. Its children are named as the model's packages and checkpoints
// name them: "mixer" (and "mix_norm", "ff_norm", "ff" for a MixerBlock;
// "ff_norm", "ff" for a WholeBlock with whole_block_ff).
std::shared_ptr<Block> MakeBlock(const LmConfig& config, int64_t index);

}  // namespace attn
