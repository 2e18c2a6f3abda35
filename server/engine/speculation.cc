// Speculative decoding with exact rollback, drafts from n-gram lookup
// (ngram_draft.h) or a draft model (model_draft.h). A round feeds the sequence's
// next token and k drafted ones in one prefill, which returns the logits
// after each; the continuation then chooses tokens from them in order, as
// plain decoding would have, while each chosen token equals the draft fed
// after it. With e tokens emitted, the state must hold the next token and
// the first e - 1 drafts: when e < k + 1 the row goes back to a copy taken
// before the round and takes those again (LmBackend::RollBackRow: the
// native backend replays what the check fed each layer for them).
// The copy is what limits this to states whose copy stops growing with the
// context (recurrent ones, windows, and key/value caches, whose positions
// stay in the row: LmBackend::SaveRowForRollBack).
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
#include <cmath>
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
// up to kMaxBackoffSteps, before drafting again; a draft model's round at
// least kPlainStepsPerLostStep plain steps for each step's time it lost
// beyond what plain decoding would have spent, up to kMaxPauseSteps. A
// failing n-gram round loses a fraction of a step (and a longer pause
// measurably misses the chances it had), a failing draft model's several
// (its own steps), so only a pause that grows with the loss holds those to
// about 1/20 = 5%.
constexpr int64_t kMaxBackoffSteps = 128;
constexpr double kPlainStepsPerLostStep = 20;
constexpr int64_t kMaxPauseSteps = 1024;
// A draft model's rounds start this short (a failing first round then costs
// little; full acceptance doubles it), and stop for the sequence after this
// many in a row did not pay while the model has not paid over the sequence
// (its catch-ups included): each resumption first feeds the draft model
// every token of the pause (its catch-up, which no round is judged by), a
// cost that grows with the pause. A model that has paid rides out a bad
// patch.
constexpr int64_t kFirstModelDraft = 2;
constexpr int64_t kMaxModelMisses = 2;

struct Chosen {
  SampledToken token;
  AcceptedToken accepted;
};

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
// measured; or, on a clock where plain steps take no time, accepted
// nothing) makes the sequence decode plainly for 2, 4, ... kMaxBackoffSteps
// steps, or 20 for each of the `lost_steps` it cost beyond plain decoding
// if longer.
void Adapt(Sequence::Drafting& drafting, int64_t limit, int64_t drafted, int64_t accepted,
           int64_t most, int64_t decode_step, bool paid, double lost_steps) {
  drafting.length =
      accepted == drafted ? std::min(most, 2 * limit) : std::max<int64_t>(2, accepted + 1);
  if (paid) {
    drafting.misses = 0;
    return;
  }
  drafting.misses = std::min<int64_t>(drafting.misses + 1, 7);
  const int64_t backoff = std::min<int64_t>(kMaxBackoffSteps, int64_t{1} << drafting.misses);
  const double payback = std::ceil(std::max(0.0, lost_steps) * kPlainStepsPerLostStep);
  drafting.resume_at =
      decode_step +
      std::max(backoff, static_cast<int64_t>(std::min<double>(payback, kMaxPauseSteps)));
}

}  // namespace

bool Engine::Impl::MaySpeculate(const Sequence& seq) const {
  const bool drafts =
      options_.speculative != Speculation::kOff || (drafter_ != nullptr && !seq.drafting.model_off);
  return drafts && cheap_rollback_ && one_row_step_timed_ && !seq.finishing && seq.generated > 0 &&
         decode_steps_ >= seq.drafting.resume_at;
}

void Engine::Impl::SettleDraftModel(Sequence& seq,
                                    const std::optional<ModelDrafter::Drafts>& from_model,
                                    int64_t emitted) {
  if (!from_model.has_value()) return;
  if (!drafter_->Settle(seq.slot, seq.drafting.model_row, *from_model, emitted).ok()) {
    seq.drafting.model_off = true;
  }
}

std::vector<int64_t> Engine::Impl::DraftFor(Sequence& seq, int64_t limit,
                                            std::optional<ModelDrafter::Drafts>* from_model) {
  if (options_.speculative == Speculation::kNgram) {
    std::vector<int64_t> draft = NgramDraft(seq.request.prompt, seq.generated_ids, limit);
    if (!draft.empty() || drafter_ == nullptr) return draft;
  }
  if (drafter_ == nullptr || seq.drafting.model_off) return {};
  // The draft model continues the prompt and the output so far, whose last
  // token is the next one to feed.
  absl::StatusOr<ModelDrafter::Drafts> drafts = drafter_->Draft(
      seq.slot, seq.drafting.model_row, seq.request.prompt, seq.generated_ids, limit);
  if (!drafts.ok()) {
    // The sequence decodes on without it; the served model is unaffected.
    std::fprintf(stderr, "warning: draft model failed, a stream decodes without it: %s\n",
                 std::string(drafts.status().message()).c_str());
    seq.drafting.model_off = true;
    return {};
  }
  *from_model = *std::move(drafts);
  return (*from_model)->tokens;
}

bool Engine::Impl::Speculate(Sequence& seq) {
  Sequence::Drafting& drafting = seq.drafting;
  int64_t limit = drafting.length > 0   ? drafting.length
                  : drafter_ != nullptr ? std::min(options_.draft_tokens, kFirstModelDraft)
                                        : options_.draft_tokens;
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
  absl::StatusOr<SavedRow> saved = backend_->SaveRowForRollBack(seq.slot);
  if (!saved.ok()) {  // decodes plainly instead
    SettleDraftModel(seq, from_model, 1);
    return false;
  }

  const auto drafted = static_cast<int64_t>(draft.size());
  std::vector<int64_t> fed = {seq.next_token};
  fed.insert(fed.end(), draft.begin(), draft.end());
  absl::StatusOr<torch::Tensor> checked = backend_->PrefillForRollBack(seq.slot, fed);
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
    if (absl::Status rolled = backend_->RollBackRow(seq.slot, *saved, fed); !rolled.ok()) {
      EndWithError(seq, rolled);
      return true;
    }
  }
  SettleDraftModel(seq, from_model, emitted);
  const absl::Duration took = clock_.Now() - started;
  observer_->OnStep(EngineObserver::Phase::kDecode, took, 1, emitted);
  observer_->OnSpeculation(drafted, accepted);

  // In plain steps: what the round cost beyond the steps it saved. The
  // draft model's catch-up is left out: the prompt's is the price of
  // drafting at all, and a pause's is bounded by the stop after
  // kMaxModelMisses rounds in a row that did not pay (which counts it).
  const absl::Duration judged = took - (from_model ? from_model->catch_up : absl::ZeroDuration());
  const double lost_steps = one_row_step_seconds_ > 0
                                ? absl::ToDoubleSeconds(judged) / one_row_step_seconds_ - emitted
                                : 0;
  const bool paid = one_row_step_seconds_ > 0 ? lost_steps < 0 : accepted > 0;
  Adapt(drafting, limit, drafted, accepted, options_.draft_tokens, decode_steps_, paid,
        from_model.has_value() ? lost_steps : 0);
  if (from_model.has_value() && one_row_step_seconds_ > 0) {
    drafting.model_gain_steps -=
        lost_steps + absl::ToDoubleSeconds(from_model->catch_up) / one_row_step_seconds_;
    if (drafting.misses >= kMaxModelMisses && drafting.model_gain_steps < 0) {
      drafting.model_off = true;
    }
  }
  for (const Chosen& next : chosen) Deliver(seq, next.token, next.accepted);
  return true;
}

}  // namespace attn::serving
