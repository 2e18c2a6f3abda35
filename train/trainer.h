// Training a CausalLm on plain-text files, end to end: tokenizer, data,
// optimisation, held-out evaluation, checkpoints, and the model package.
//
// Determinism: the model is initialised from `seed`, and the batch of step s
// is drawn from a generator seeded by (seed, s) alone, so a run resumed from a
// checkpoint sees exactly the batches the uninterrupted run would have, and
// (with the same thread count) reproduces its losses.
//
// Length curriculum: with length_stages, step s trains on sequences of the
// first stage whose `until` is at least s (the last stage after that), at
// batch * seq_len / stage length sequences (at least 1), so every step sees
// about the same number of tokens and the learning-rate schedule keeps its
// meaning. Documents: each corpus file is one document; a training or
// held-out sequence never crosses from one document into the next (it may
// end with the document's </s>), and a document shorter than a stage's
// sequences is skipped at that stage.
//
// Schedule: AdamW; the learning rate rises linearly over `warmup` steps, then
// follows a cosine down to min_lr_ratio * lr at the last step. Gradients are
// clipped to a global norm of grad_clip.
#pragma once

#include <torch/optim/adamw.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/lm/language_model.h"
#include "model/text/tokenizer.h"

namespace attn {

// One stage of the sequence-length curriculum (see the file comment).
struct LengthStage {
  int64_t seq_len = 256;
  int64_t until = 0;  // the stage's last step, 1-based
};

// Mean held-out loss of the positions [begin, end) of the evaluated sequences.
struct SegmentLoss {
  int64_t begin = 0, end = 0;
  double loss = 0.0;
};

// Position segments [0, 128), [128, 256), [256, 512), ... doubling, cut at
// seq_len (one segment [0, seq_len) when seq_len <= 128).
std::vector<std::pair<int64_t, int64_t>> PositionSegments(int64_t seq_len);

struct TrainOptions {
  std::vector<std::string> corpus_files;
  LmConfig model;  // model.vocab_size is also the tokenizer's size
  int64_t seq_len = 256;
  int64_t batch = 16;
  std::vector<LengthStage> length_stages;  // empty: seq_len at every step
  int64_t steps = 1000;
  double lr = 3e-3;
  double min_lr_ratio = 0.1;
  int64_t warmup = 100;
  double weight_decay = 0.01;
  double grad_clip = 1.0;
  uint64_t seed = 1;
  double heldout_fraction = 0.05;  // the end of the token stream
  int64_t eval_every = 200;        // 0: only at the end
  int64_t eval_batches = 8;
  std::string checkpoint_dir;      // empty: no checkpoints
  int64_t checkpoint_every = 500;  // 0: only at the end (when a dir is set)
};

struct StepReport {
  int64_t step = 0;  // 1-based, the step just taken
  int64_t steps = 0;
  double loss = 0.0;  // training loss of this step's batch (nats/token)
  double lr = 0.0;
  double tokens_per_second = 0.0;
  int64_t seq_len = 0;  // of this step's sequences
  int64_t batch = 0;
  std::optional<double> heldout_loss;         // set on evaluation steps
  std::vector<SegmentLoss> heldout_segments;  // with heldout_loss, by position
};

class Trainer {
 public:
  // Reads and tokenizes the corpus (training the tokenizer), builds the model.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const TrainOptions& options);
  // Continues from the checkpoint in options.checkpoint_dir: model,
  // tokenizer, optimizer state and step; the corpus is read again.
  static absl::StatusOr<std::unique_ptr<Trainer>> Resume(const TrainOptions& options);

  // Trains until options.steps; calls `on_step` after every step.
  absl::Status Run(const std::function<void(const StepReport&)>& on_step);
  // Mean loss per token over the fixed held-out batches, at the sequence
  // length of the current step; `segments`, if given, receives it by
  // position segment.
  double HeldoutLoss(std::vector<SegmentLoss>* segments = nullptr);
  absl::Status SaveCheckpoint();
  absl::Status SavePackage(const std::string& path);

  int64_t step() const { return step_; }
  CausalLm& model() { return model_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  int64_t train_tokens() const { return train_.tokens.numel(); }
  int64_t heldout_tokens() const { return heldout_.tokens.numel(); }
  // The learning rate at step s (1-based).
  double LearningRate(int64_t step) const;
  // The sequence length and batch of step s (1-based).
  int64_t SeqLenAt(int64_t step) const;
  int64_t BatchAt(int64_t step) const;

 private:
  Trainer(const TrainOptions& options, Tokenizer tokenizer, CausalLm model);
  absl::Status LoadCorpus();
  // A token stream and where its documents end (the index of each </s>,
  // and the stream's last token).
  struct Stream {
    torch::Tensor tokens;  // int64
    std::vector<int64_t> ends;
  };
  // Inputs and targets [batch, seq_len], windows of `stream` that stay
  // inside one document, drawn with `generator`.
  absl::StatusOr<std::pair<torch::Tensor, torch::Tensor>> Batch(const Stream& stream,
                                                                int64_t seq_len, int64_t batch,
                                                                torch::Generator& generator) const;
  absl::StatusOr<double> TrainStep();

  TrainOptions options_;
  std::unique_ptr<Tokenizer> tokenizer_;
  CausalLm model_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  Stream train_, heldout_;
  int64_t step_ = 0;
};

}  // namespace attn
