#include "server/engine/model_draft.h"

#include <torch/torch.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace attn::serving {
namespace {

torch::Tensor Ids(std::vector<int64_t> ids, const torch::Device& device) {
  return torch::tensor(ids, torch::dtype(torch::kLong)).to(device);
}

// Tokens [begin, begin + count) of the history `prompt` then `output`.
std::vector<int64_t> Slice(absl::Span<const int64_t> prompt, absl::Span<const int64_t> output,
                           int64_t begin, int64_t count) {
  const auto p = static_cast<int64_t>(prompt.size());
  std::vector<int64_t> ids;
  ids.reserve(count);
  for (int64_t i = begin; i < begin + count; ++i) ids.push_back(i < p ? prompt[i] : output[i - p]);
  return ids;
}

// The most likely of the first `ids` ids in logits whose last dimension is
// the vocabulary.
absl::StatusOr<int64_t> Greedy(const absl::StatusOr<torch::Tensor>& logits, int64_t ids) {
  if (!logits.ok()) return logits.status();
  try {
    const torch::Tensor last = logits->reshape({-1, logits->size(-1)})[-1];
    return last.narrow(0, 0, std::min(ids, last.size(0))).argmax().item<int64_t>();
  } catch (const c10::Error& error) {
    return absl::InternalError(
        absl::StrCat("draft model's logits: ", error.what_without_backtrace()));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelDrafter>> ModelDrafter::Create(std::shared_ptr<LmBackend> model,
                                                                   int64_t rows,
                                                                   int64_t prefill_chunk,
                                                                   int64_t ids,
                                                                   const Clock& clock) {
  if (model == nullptr) return absl::InvalidArgumentError("draft model: none given");
  if (model->rows() != rows) {
    if (absl::Status allocated = model->AllocateRows(rows); !allocated.ok()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("draft model: ", rows, " rows: ", allocated.message()));
    }
  }
  return std::unique_ptr<ModelDrafter>(
      new ModelDrafter(std::move(model), prefill_chunk, ids, clock));
}

absl::StatusOr<torch::Tensor> ModelDrafter::CatchUp(int64_t slot, Row& row,
                                                    absl::Span<const int64_t> prompt,
                                                    absl::Span<const int64_t> output) {
  const auto size = static_cast<int64_t>(prompt.size() + output.size());
  if (ToFeed(row, size) == size) {  // a new sequence (or one that went back)
    if (absl::Status reset = model_->ResetRow(slot); !reset.ok()) return reset;
    row.fed = 0;
  }
  const torch::Tensor rows = Ids({slot}, model_->device());
  absl::StatusOr<torch::Tensor> logits;
  while (row.fed < size) {
    const int64_t count = std::min(prefill_chunk_, size - row.fed);
    const bool last = row.fed + count == size;
    logits = model_->Prefill(
        Ids(Slice(prompt, output, row.fed, count), model_->device()).view({1, count}), rows,
        last ? PrefillLogits::kLast : PrefillLogits::kNone);
    if (!logits.ok()) {
      row.fed = -1;
      return logits.status();
    }
    row.fed += count;
  }
  return logits;
}

absl::StatusOr<ModelDrafter::Drafts> ModelDrafter::Draft(int64_t slot, Row& row,
                                                         absl::Span<const int64_t> prompt,
                                                         absl::Span<const int64_t> output,
                                                         int64_t max_tokens) {
  Drafts drafts;
  const auto history = static_cast<int64_t>(prompt.size() + output.size());
  if (max_tokens < 1 || history == 0) return drafts;
  if (const int64_t context = model_->max_context(); context > 0) {
    max_tokens = std::min<int64_t>(max_tokens, context - history);
    if (max_tokens < 1) return drafts;
  }
  const absl::Time started = clock_.Now();
  drafts.caught_up = ToFeed(row, history);
  absl::StatusOr<int64_t> next = Greedy(CatchUp(slot, row, prompt, output), ids_);
  drafts.catch_up = clock_.Now() - started;
  absl::StatusOr<SavedRow> before = next.ok() ? model_->SaveRow(slot) : next.status();
  if (!before.ok()) {
    row.fed = -1;
    return before.status();
  }
  drafts.before = *std::move(before);
  drafts.history = history;
  const torch::Tensor rows = Ids({slot}, model_->device());
  drafts.tokens.push_back(*next);
  while (static_cast<int64_t>(drafts.tokens.size()) < max_tokens) {
    next = Greedy(model_->Step(Ids({drafts.tokens.back()}, model_->device()), rows), ids_);
    if (!next.ok()) {
      row.fed = -1;
      return next.status();
    }
    ++row.fed;
    drafts.tokens.push_back(*next);
  }
  return drafts;
}

absl::Status ModelDrafter::Settle(int64_t slot, Row& row, const Drafts& drafts, int64_t emitted) {
  // The row holds the history and the drafts but the last; the served model
  // confirmed the first emitted - 1 drafts.
  const auto stepped = static_cast<int64_t>(drafts.tokens.size()) - 1;
  if (emitted - 1 >= stepped) return absl::OkStatus();
  if (absl::Status loaded = model_->LoadRow(slot, drafts.before); !loaded.ok()) {
    row.fed = -1;
    return loaded;
  }
  row.fed = drafts.history;
  return absl::OkStatus();
}

}  // namespace attn::serving
