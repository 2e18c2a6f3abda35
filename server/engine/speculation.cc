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
namespace engine_internal {

// A token plain decoding chooses, as the continuation took it.
struct Chosen {
  SampledToken token;
  AcceptedToken accepted;
};

}  // namespace engine_internal

using engine_internal::Chosen;

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
// In a batch of several rows, a row without drafts waits for the others'
// checks: an iteration that took longer than a plain step of that many rows
// made it lose the difference, so drafting at that batch size pauses as a
// draft model's round pauses its sequence, for 2, 4, ... kMaxBackoffSteps
// steps, or kPlainStepsPerLostStep for each step lost if longer: the rows
// that do not draft stay within about 5% of plain decoding.

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

// The plain decode steps to wait after the `misses`-th loss in a row, which
// cost `lost_steps` plain steps: 2^misses up to kMaxBackoffSteps, or
// kPlainStepsPerLostStep per step lost if longer, up to kMaxPauseSteps.
int64_t PauseSteps(int64_t misses, double lost_steps) {
  const int64_t backoff = std::min<int64_t>(kMaxBackoffSteps, int64_t{1} << misses);
  const double payback = std::ceil(std::max(0.0, lost_steps) * kPlainStepsPerLostStep);
  return std::max(backoff, static_cast<int64_t>(std::min<double>(payback, kMaxPauseSteps)));
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
  drafting.resume_at = decode_step + PauseSteps(drafting.misses, lost_steps);
}

// The tokens a sequence's row holds: every token but the next one.
int64_t RowLength(const Sequence& seq) {
  return seq.request.start_tokens + static_cast<int64_t>(seq.request.prompt.size()) +
         seq.generated - 1;
}

}  // namespace

namespace engine_internal {

struct SpeculationRound {
  Sequence* seq = nullptr;
  int64_t limit = 0;   // the most tokens it could draft
  int64_t length = 0;  // RowLength before the round
  std::optional<ModelDrafter::Drafts> from_model;
  SavedRow saved;              // the row before the round (SaveRowForRollBack)
  std::vector<int64_t> fed;    // the next token, then the drafts
  std::vector<Chosen> chosen;  // what plain decoding emits from the check
  bool failed = false;         // the round ended its sequence with an error
};

}  // namespace engine_internal

namespace {

// The rounds' indices in groups that one prefill can check: all together
// where the backend continues rows at any lengths, else by row length.
std::vector<std::vector<size_t>> CheckGroups(const std::vector<SpeculationRound>& rounds,
                                             bool any_lengths) {
  std::vector<std::vector<size_t>> groups;
  std::vector<int64_t> lengths;
  for (size_t i = 0; i < rounds.size(); ++i) {
    const int64_t length = any_lengths ? 0 : rounds[i].length;
    const auto found = std::find(lengths.begin(), lengths.end(), length);
    if (found == lengths.end()) {
      lengths.push_back(length);
      groups.push_back({i});
    } else {
      groups[found - lengths.begin()].push_back(i);
    }
  }
  return groups;
}

}  // namespace

bool Engine::Impl::MaySpeculate(const Sequence& seq, int64_t rows) const {
  const bool drafts = options_.speculative != Speculation::kOff ||
                      (rows == 1 && drafter_ != nullptr && !seq.drafting.model_off);
  return drafts && cheap_rollback_ && StepSeconds(rows) >= 0 && !seq.finishing &&
         seq.generated > 0 && decode_steps_ >= seq.drafting.resume_at;
}

void Engine::Impl::SettleDraftModel(Sequence& seq,
                                    const std::optional<ModelDrafter::Drafts>& from_model,
                                    int64_t emitted) {
  if (!from_model.has_value()) return;
  if (!drafter_->Settle(seq.slot, seq.drafting.model_row, *from_model, emitted).ok()) {
    seq.drafting.model_off = true;
  }
}

std::vector<int64_t> Engine::Impl::DraftFor(Sequence& seq, int64_t limit, int64_t rows,
                                            std::optional<ModelDrafter::Drafts>* from_model) {
  if (options_.speculative == Speculation::kNgram) {
    std::vector<int64_t> draft = NgramDraft(seq.request.prompt, seq.generated_ids, limit);
    if (!draft.empty() || drafter_ == nullptr) return draft;
  }
  if (rows > 1 || drafter_ == nullptr || seq.drafting.model_off) return {};
  if (!LagFits(seq)) {  // nor will it later: the lag only grows
    seq.drafting.model_off = true;
    return {};
  }
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
  NoteCatchUp(seq, drafts->caught_up, absl::ToDoubleSeconds(drafts->catch_up));
  *from_model = *std::move(drafts);
  return (*from_model)->tokens;
}

bool Engine::Impl::LagFits(const Sequence& seq) const {
  const auto history = static_cast<int64_t>(seq.request.prompt.size() + seq.generated_ids.size());
  const int64_t lag = ModelDrafter::ToFeed(seq.drafting.model_row, history);
  if (lag <= options_.draft_tokens + 1) return true;  // a round's own tokens
  const double per_token =
      catch_up_seconds_per_token_ > 0 ? catch_up_seconds_per_token_ : prefill_seconds_per_token_;
  const double step_seconds = StepSeconds(1);
  if (per_token <= 0 || step_seconds <= 0) return true;  // nothing to go by
  const double plain_seconds = static_cast<double>(seq.request.max_tokens) * step_seconds;
  return seq.drafting.model_lag_seconds + lag * per_token <=
         options_.draft_prefill_share * plain_seconds;
}

void Engine::Impl::NoteCatchUp(Sequence& seq, int64_t tokens, double seconds) {
  if (tokens <= options_.draft_tokens + 1) return;  // a round's own
  seq.drafting.model_lag_seconds += seconds;
  if (tokens >= kTimedTokens) Average(catch_up_seconds_per_token_, seconds / tokens);
}

bool Engine::Impl::Speculate(const std::vector<Sequence*>& batch) {
  // Drafting, the copies and the plain rows' step are part of the cost.
  const absl::Time started = clock_.Now();
  const auto rows = static_cast<int64_t>(batch.size());
  if (batch_judgements_.size() <= static_cast<size_t>(rows)) batch_judgements_.resize(rows + 1);
  if (decode_steps_ < batch_judgements_[rows].resume_at) return false;
  std::vector<SpeculationRound> rounds;
  std::vector<Sequence*> plain;
  for (Sequence* seq : batch) {
    std::optional<SpeculationRound> round;
    if (MaySpeculate(*seq, rows)) round = StartRound(*seq, rows);
    if (round.has_value()) {
      rounds.push_back(*std::move(round));
    } else {
      plain.push_back(seq);
    }
  }
  if (rounds.empty()) return false;
  CheckRounds(rounds);
  const absl::Duration checking = clock_.Now() - started;
  if (!plain.empty()) PlainStep(plain);
  const absl::Duration took = clock_.Now() - started;
  FinishRounds(rounds, checking, took, rows);
  if (!plain.empty()) JudgeBatch(rows, took);
  return true;
}

void Engine::Impl::JudgeBatch(int64_t rows, absl::Duration took) {
  const double step_seconds = StepSeconds(rows);
  if (step_seconds <= 0) return;  // a clock where steps take no time
  BatchJudgement& judgement = batch_judgements_[rows];
  const double lost_steps = absl::ToDoubleSeconds(took) / step_seconds - 1;
  if (lost_steps <= 0) {
    judgement.misses = 0;
    return;
  }
  judgement.misses = std::min<int64_t>(judgement.misses + 1, 7);
  judgement.resume_at = decode_steps_ + PauseSteps(judgement.misses, lost_steps);
}

std::optional<SpeculationRound> Engine::Impl::StartRound(Sequence& seq, int64_t rows) {
  const Sequence::Drafting& drafting = seq.drafting;
  int64_t limit = drafting.length > 0 ? drafting.length
                  : drafter_ != nullptr && rows == 1
                      ? std::min(options_.draft_tokens, kFirstModelDraft)
                      : options_.draft_tokens;
  const int64_t length = RowLength(seq);
  if (const int64_t context = backend_->max_context(); context > 0) {
    limit = std::min(limit, context - length - 1);  // the round feeds the next token too
  }
  SpeculationRound round;
  round.seq = &seq;
  round.limit = limit;
  round.length = length;
  const std::vector<int64_t> draft = DraftFor(seq, limit, rows, &round.from_model);
  if (draft.empty()) return std::nullopt;
  absl::StatusOr<SavedRow> saved = backend_->SaveRowForRollBack(seq.slot);
  if (!saved.ok()) {  // decodes plainly instead
    SettleDraftModel(seq, round.from_model, 1);
    return std::nullopt;
  }
  round.saved = *std::move(saved);
  round.fed = {seq.next_token};
  round.fed.insert(round.fed.end(), draft.begin(), draft.end());
  return round;
}

void Engine::Impl::CheckRounds(std::vector<SpeculationRound>& rounds) {
  for (const std::vector<size_t>& group :
       CheckGroups(rounds, backend_->PrefillsRowsAtAnyLengths())) {
    CheckGroup(rounds, group);
  }
}

void Engine::Impl::CheckGroup(std::vector<SpeculationRound>& rounds,
                              const std::vector<size_t>& group) {
  // Shorter drafts are padded with their last token to the group's longest:
  // a prefill's rows are fed as many tokens each, and a row keeps only what
  // it accepts. Where the context is bounded, no row may be fed past it:
  // longer drafts are cut to what the fullest row has room for (each has
  // room for two tokens, or it would not have drafted).
  size_t longest = 0;
  for (size_t i : group) longest = std::max(longest, rounds[i].fed.size());
  if (const int64_t context = backend_->max_context(); context > 0) {
    for (size_t i : group) {
      longest = std::min(longest, static_cast<size_t>(context - rounds[i].length));
    }
    for (size_t i : group) rounds[i].fed.resize(std::min(rounds[i].fed.size(), longest));
  }
  std::vector<int64_t> slots;
  std::vector<std::vector<int64_t>> fed;
  for (size_t i : group) {
    slots.push_back(rounds[i].seq->slot);
    fed.push_back(rounds[i].fed);
    fed.back().resize(longest, rounds[i].fed.back());
  }
  absl::StatusOr<torch::Tensor> checked = backend_->PrefillForRollBack(slots, fed);
  torch::Tensor logits;
  if (checked.ok()) {
    try {
      logits = checked->to(torch::kCPU, torch::kFloat).contiguous();
    } catch (const c10::Error& error) {
      checked = absl::InternalError(
          absl::StrCat("speculative step failed: ", error.what_without_backtrace()));
    }
  }
  for (size_t j = 0; j < group.size(); ++j) {
    SpeculationRound& round = rounds[group[j]];
    if (!checked.ok()) {
      round.failed = true;
      EndWithError(*round.seq, checked.status());
      continue;
    }
    const std::vector<int64_t> draft(round.fed.begin() + 1, round.fed.end());
    round.chosen = ChooseTokens(*round.seq->continuation, logits[j], draft);
    if (round.chosen.size() == longest) continue;  // everything fed is kept
    std::vector<int64_t> kept(round.fed.begin(), round.fed.begin() + round.chosen.size());
    if (absl::Status rolled = backend_->RollBackRow(round.seq->slot, round.saved, kept);
        !rolled.ok()) {
      round.failed = true;
      EndWithError(*round.seq, rolled);
    }
  }
}

void Engine::Impl::FinishRounds(std::vector<SpeculationRound>& rounds, absl::Duration checking,
                                absl::Duration took, int64_t rows) {
  int64_t emitted = 0;
  for (const SpeculationRound& round : rounds) {
    emitted += round.failed ? 0 : static_cast<int64_t>(round.chosen.size());
  }
  observer_->OnStep(EngineObserver::Phase::kDecode, checking, static_cast<int64_t>(rounds.size()),
                    emitted);
  // Each stream waited the whole iteration for its tokens, where a plain
  // step of that many rows gives it one.
  for (SpeculationRound& round : rounds) {
    if (round.failed) continue;
    Judge(round, absl::ToDoubleSeconds(took), StepSeconds(rows));
    for (const Chosen& next : round.chosen) Deliver(*round.seq, next.token, next.accepted);
  }
}

void Engine::Impl::Judge(SpeculationRound& round, double round_seconds, double step_seconds) {
  Sequence& seq = *round.seq;
  const auto drafted = static_cast<int64_t>(round.fed.size()) - 1;
  const auto emitted = static_cast<int64_t>(round.chosen.size());
  int64_t accepted = 0;
  while (accepted < std::min(emitted, drafted) &&
         round.chosen[accepted].token.id == round.fed[accepted + 1]) {
    ++accepted;
  }
  SettleDraftModel(seq, round.from_model, emitted);
  observer_->OnSpeculation(drafted, accepted);
  // The draft model's catch-up is left out: the prompt's is the price of
  // drafting at all, and a pause's is bounded by the stop after
  // kMaxModelMisses rounds in a row that did not pay (which counts it).
  const double catch_up =
      round.from_model ? absl::ToDoubleSeconds(round.from_model->catch_up) : 0.0;
  const double lost = step_seconds > 0 ? (round_seconds - catch_up) / step_seconds - emitted : 0;
  const bool paid = step_seconds > 0 ? lost < 0 : accepted > 0;
  Sequence::Drafting& drafting = seq.drafting;
  Adapt(drafting, round.limit, drafted, accepted, options_.draft_tokens, decode_steps_, paid,
        round.from_model.has_value() ? lost : 0);
  if (round.from_model.has_value() && step_seconds > 0) {
    drafting.model_gain_steps -= lost + catch_up / step_seconds;
    if (drafting.misses >= kMaxModelMisses && drafting.model_gain_steps < 0) {
      drafting.model_off = true;
    }
  }
}

}  // namespace attn::serving
