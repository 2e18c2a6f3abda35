// Speculative decoding with exact rollback, drafts from n-gram lookup
// (ngram_draft.h) or a draft model (model_draft.h). A round feeds the sequence's
// next token and k drafted ones in one prefill, which returns the logits
// after each; the continuation then chooses tokens from them in order, as
// plain decoding would have, while each chosen token equals the draft fed
// after it. With e tokens emitted, the state must hold the next token and
// the first e - 1 drafts: when e < k + 1 the row goes back to a copy taken
// before the round and is fed those (a prefill that computes no logits).
// The copy is what limits this to states that stop growing with the
// context (recurrent ones, windows).
//
// Sampled sequences draft too, and keep their distribution: speculative
// sampling (Leviathan et al. 2023; Chen et al. 2023) accepts a draft token
// d with probability min(1, p(d) / q(d)) and otherwise draws from
// max(0, p - q), renormalised. A drafted token is certain (q(d) = 1), so
// that is: accept with probability p(d), else draw from p without d, which
// is the same as drawing x from p and accepting d when x = d. The
// continuation draws once per emitted token, as plain decoding does, from
// the same logits after the same tokens, so a seeded sequence gets plain
// decoding's tokens too (up to float rounding between a prefill and a step).
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/backend/backend.h"
#include "model/lm/continuation.h"
#include "server/engine/engine_impl.h"
#include "server/engine/ngram_draft.h"

namespace attn::serving {
namespace {

// A round that did not pay makes the sequence wait 2^misses decode steps,
// up to this many, before drafting again: drafts that keep failing cost a
// copy and a second pass each, so they then cost at most a few percent.
constexpr int64_t kMaxBackoffSteps = 128;

struct Chosen {
  SampledToken token;
  AcceptedToken accepted;
};

// Feeds `tokens` to row `slot` of `backend` in one prefill.
absl::StatusOr<torch::Tensor> PrefillRow(LmBackend& backend, int64_t slot,
                                         const std::vector<int64_t>& tokens, PrefillLogits wanted) {
  const torch::Device device = backend.device();
  const auto count = static_cast<int64_t>(tokens.size());
  return backend.Prefill(
      torch::tensor(tokens, torch::dtype(torch::kLong)).view({1, count}).to(device),
      torch::tensor(std::vector<int64_t>{slot}, torch::dtype(torch::kLong)).to(device), wanted);
}

// The tokens plain decoding chooses from `logits` [k + 1, V] (after the next
// token and after each of the k drafts), while each equals the draft fed
// after it and none ends the sequence.
std::vector<Chosen> ChooseTokens(Continuation& continuation, const torch::Tensor& logits,
                                 const std::vector<int64_t>& draft) {
  const int64_t vocab = logits.size(1);
  const float* data = logits.data_ptr<float>();
  std::vector<Chosen> chosen;
  for (size_t j = 0; j <= draft.size(); ++j) {
    Chosen next;
    next.token = continuation.Sample(data + j * vocab, vocab);
    next.accepted = continuation.Accept(next.token.id);
    chosen.push_back(std::move(next));
    if (chosen.back().accepted.finish_reason != FinishReason::kUnspecified) break;
    if (j == draft.size() || chosen.back().token.id != draft[j]) break;
  }
  return chosen;
}

// The next round drafts more after a full acceptance, fewer after a miss.
// A round that did not pay (it took longer per token than a plain step,
// measured; or, before any plain step was timed, accepted nothing) makes
// the sequence decode plainly for 2, 4, ... kMaxBackoffSteps steps.
void Adapt(Sequence::Drafting& drafting, int64_t limit, int64_t drafted, int64_t accepted,
           int64_t most, int64_t decode_step, bool paid) {
  drafting.length =
      accepted == drafted ? std::min(most, 2 * limit) : std::max<int64_t>(2, accepted + 1);
  if (paid) {
    drafting.misses = 0;
    return;
  }
  drafting.misses = std::min<int64_t>(drafting.misses + 1, 7);
  drafting.resume_at =
      decode_step + std::min<int64_t>(kMaxBackoffSteps, int64_t{1} << drafting.misses);
}

}  // namespace

bool Engine::Impl::MaySpeculate(const Sequence& seq) const {
  const bool drafts = options_.speculative != Speculation::kOff ||
                      (drafter_ != nullptr && !seq.drafting.model_failed);
  return drafts && bounded_state_ && !seq.finishing && seq.generated > 0 &&
         decode_steps_ >= seq.drafting.resume_at;
}

void Engine::Impl::SettleDraftModel(Sequence& seq,
                                    const std::optional<ModelDrafter::Drafts>& from_model,
                                    int64_t emitted) {
  if (!from_model.has_value()) return;
  if (!drafter_->Settle(seq.slot, seq.drafting.model_row, *from_model, emitted).ok()) {
    seq.drafting.model_failed = true;
  }
}

std::vector<int64_t> Engine::Impl::DraftFor(Sequence& seq, int64_t limit,
                                            std::optional<ModelDrafter::Drafts>* from_model) {
  if (options_.speculative == Speculation::kNgram) {
    std::vector<int64_t> draft = NgramDraft(seq.request.prompt, seq.generated_ids, limit);
    if (!draft.empty() || drafter_ == nullptr) return draft;
  }
  if (drafter_ == nullptr || seq.drafting.model_failed) return {};
  // The tokens from the prompt's first to the next one to feed (the last
  // generated), which the draft model continues.
  std::vector<int64_t> history = seq.request.prompt;
  history.insert(history.end(), seq.generated_ids.begin(), seq.generated_ids.end());
  absl::StatusOr<ModelDrafter::Drafts> drafts =
      drafter_->Draft(seq.slot, seq.drafting.model_row, history, limit);
  if (!drafts.ok()) {
    // The sequence decodes on without it; the served model is unaffected.
    std::fprintf(stderr, "warning: draft model failed, a stream decodes without it: %s\n",
                 std::string(drafts.status().message()).c_str());
    seq.drafting.model_failed = true;
    return {};
  }
  *from_model = *std::move(drafts);
  return (*from_model)->tokens;
}

absl::Status Engine::Impl::RollBack(const Sequence& seq, const SavedRow& saved,
                                    const std::vector<int64_t>& tokens) {
  if (absl::Status loaded = backend_->LoadRow(seq.slot, saved); !loaded.ok()) return loaded;
  return PrefillRow(*backend_, seq.slot, tokens, PrefillLogits::kNone).status();
}

bool Engine::Impl::Speculate(Sequence& seq) {
  Sequence::Drafting& drafting = seq.drafting;
  int64_t limit = drafting.length > 0 ? drafting.length : options_.draft_tokens;
  if (const int64_t context = backend_->max_context(); context > 0) {
    // The state holds every token but the next one; the round adds it too.
    const int64_t fed = seq.request.start_tokens + static_cast<int64_t>(seq.request.prompt.size()) +
                        seq.generated - 1;
    limit = std::min(limit, context - fed - 1);
  }
  // Drafting, and the copy, are part of the round's cost.
  const absl::Time started = clock_.Now();
  std::optional<ModelDrafter::Drafts> from_model;
  const std::vector<int64_t> draft = DraftFor(seq, limit, &from_model);
  if (draft.empty()) return false;
  absl::StatusOr<SavedRow> saved = backend_->SaveRow(seq.slot);
  if (!saved.ok()) {  // decodes plainly instead
    SettleDraftModel(seq, from_model, 1);
    return false;
  }

  const auto drafted = static_cast<int64_t>(draft.size());
  std::vector<int64_t> fed = {seq.next_token};
  fed.insert(fed.end(), draft.begin(), draft.end());
  absl::StatusOr<torch::Tensor> checked = PrefillRow(*backend_, seq.slot, fed, PrefillLogits::kAll);
  torch::Tensor logits;
  if (checked.ok()) {
    try {
      logits = (*checked)[0].to(torch::kCPU, torch::kFloat).contiguous();
    } catch (const c10::Error& error) {
      checked = absl::InternalError(
          absl::StrCat("speculative step failed: ", error.what_without_backtrace()));
    }
  }
  if (!checked.ok()) {
    EndWithError(seq, checked.status());
    return true;
  }

  const std::vector<Chosen> chosen = ChooseTokens(*seq.continuation, logits, draft);
  const auto emitted = static_cast<int64_t>(chosen.size());
  int64_t accepted = 0;
  while (accepted < std::min(emitted, drafted) && chosen[accepted].token.id == draft[accepted]) {
    ++accepted;
  }
  if (emitted < drafted + 1) {
    fed.resize(emitted);  // the next token and the drafts the state keeps
    if (absl::Status rolled = RollBack(seq, *saved, fed); !rolled.ok()) {
      EndWithError(seq, rolled);
      return true;
    }
  }
  SettleDraftModel(seq, from_model, emitted);
  const absl::Duration took = clock_.Now() - started;
  observer_->OnStep(EngineObserver::Phase::kDecode, took, 1, emitted);
  observer_->OnSpeculation(drafted, accepted);

  const bool paid = one_row_step_seconds_ > 0
                        ? absl::ToDoubleSeconds(took) < emitted * one_row_step_seconds_
                        : accepted > 0;
  Adapt(drafting, limit, drafted, accepted, options_.draft_tokens, decode_steps_, paid);
  for (const Chosen& next : chosen) Deliver(seq, next.token, next.accepted);
  return true;
}

}  // namespace attn::serving
