#include "model/lm/language_model.h"

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "model/layers/dense.h"
#include "model/lm/row_groups.h"
#include "model/mixers/state_pool.h"
#include "model/mixers/step_rows.h"

namespace attn {

int64_t LmState::bytes_per_row() const {
  int64_t bytes = 0;
  for (const auto& layer : layers) bytes += layer.bytes_per_row();
  return bytes;
}

CausalLmImpl::CausalLmImpl(const LmConfig& config) : config_(config) {
  const auto status = config.Validate();
  TORCH_CHECK(status.ok(), "invalid model config: ", status.message());
  embedding_ =
      register_module("embedding", torch::nn::Embedding(config.vocab_size, config.d_model));
  {
    torch::NoGradGuard no_grad;
    embedding_->weight.normal_(0.0, 1.0 / std::sqrt(static_cast<double>(config.d_model)));
  }
  if (config.positions == PositionKind::kLearned) {
    learned_positions_ =
        register_module("positions", LearnedPositions(config.max_context, config.d_model));
  }
  if (config.positions == PositionKind::kSinusoidal) {
    // 2 x 2048 rows: every position below 4M at the same cost.
    constexpr int64_t kTablePositions = 2048;
    sinusoidal_positions_ = SinusoidalPositions(config.d_model, kTablePositions);
  }
  auto list = register_module("layers", torch::nn::ModuleList());
  for (int64_t l = 0; l < config.layers; ++l) {
    layers_.push_back(MakeBlock(config, l));
    list->push_back(layers_.back());
  }
  final_norm_ = register_module("final_norm", Norm(config.norm, config.d_model, config.norm_eps));
  if (!config.tie_embeddings) {
    head_ = register_parameter("head_weight", torch::randn({config.vocab_size, config.d_model}) /
                                                  std::sqrt(static_cast<double>(config.d_model)));
  }
  ChooseRowGroups();
}

void CausalLmImpl::CheckTokens(const torch::Tensor& tokens) const {
  TORCH_CHECK(tokens.scalar_type() == torch::kLong, "tokens must be int64");
  if (tokens.numel() == 0) return;
  auto cpu = tokens.to(torch::kCPU).contiguous();
  const int64_t* ids = cpu.data_ptr<int64_t>();
  for (int64_t i = 0; i < cpu.numel(); ++i) {
    TORCH_CHECK(ids[i] >= 0 && ids[i] < config_.vocab_size, "token id ", ids[i],
                " outside the vocabulary [0, ", config_.vocab_size, ")");
  }
}

torch::Tensor CausalLmImpl::Embed(const torch::Tensor& tokens, const torch::Tensor& positions,
                                  bool checked) {
  auto h = embedding_->forward(tokens);
  // A table that dropped its float32 values (QuantizeBf16 on a GPU) gives
  // bf16 rows: the residual stream stays float32.
  if (h.scalar_type() == torch::kBFloat16) h = h.to(torch::kFloat);
  switch (config_.positions) {
    case PositionKind::kNone:
      return h;
    case PositionKind::kSinusoidal:
      return h + sinusoidal_positions_->forward(positions).to(h.options());
    case PositionKind::kLearned:
      return h + (checked ? learned_positions_->Clamped(positions)
                          : learned_positions_->forward(positions));
  }
  return h;
}

torch::Tensor CausalLmImpl::Head(const torch::Tensor& hidden) {
  return Dense(final_norm_->forward(hidden), head_.defined() ? head_ : embedding_->weight);
}

torch::Tensor CausalLmImpl::forward(const torch::Tensor& tokens) {
  TORCH_CHECK(tokens.dim() == 2, "tokens must be [batch, time], got ", tokens.sizes());
  CheckTokens(tokens);
  auto positions = torch::arange(tokens.size(1), tokens.options()).expand_as(tokens);
  auto h = Embed(tokens, positions);
  LayerCarry carry;
  for (auto& layer : layers_) h = layer->Forward(h, carry);
  return Head(h);
}

LmState CausalLmImpl::initial_state(int64_t rows, torch::Device device) const {
  LmState state;
  for (const auto& layer : layers_)
    state.layers.push_back(MakeStatePool(layer->mixer(), rows, device));
  return state;
}

void CausalLmImpl::ResetSlots(LmState& state, const torch::Tensor& slots) const {
  for (size_t l = 0; l < layers_.size(); ++l)
    layers_[l]->mixer().ResetSlots(state.layers[l], slots);
}

void CausalLmImpl::ReleaseSlots(LmState& state, const torch::Tensor& slots) const {
  for (size_t l = 0; l < layers_.size(); ++l) {
    layers_[l]->mixer().ReleaseSlots(state.layers[l], slots);
  }
}

namespace {

// Appends a layer's copy to the flat list SaveRow returns.
void AppendLayer(const MixerState& layer, std::vector<torch::Tensor>& saved) {
  saved.push_back(layer.length);
  saved.insert(saved.end(), layer.tensors.begin(), layer.tensors.end());
}

}  // namespace

std::vector<torch::Tensor> CausalLmImpl::SaveRow(const LmState& state, int64_t row,
                                                 int64_t room) const {
  std::vector<torch::Tensor> saved;
  for (size_t l = 0; l < layers_.size(); ++l) {
    AppendLayer(layers_[l]->mixer().SaveRow(state.layers[l], row, room), saved);
  }
  return saved;
}

std::vector<MixerState> CausalLmImpl::SplitSaved(const LmState& state,
                                                 const std::vector<torch::Tensor>& saved) const {
  // Split the list by the layers' tensor counts, then check that every
  // layer holds the same length.
  std::vector<MixerState> layers(layers_.size());
  size_t next = 0;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const size_t count = state.layers[l].tensors.size();
    TORCH_CHECK(next + 1 + count <= saved.size(), "saved state: ", saved.size(),
                " tensors, too few for this model's ", layers_.size(), " layers");
    layers[l].length = saved[next];
    layers[l].tensors.assign(saved.begin() + next + 1, saved.begin() + next + 1 + count);
    next += 1 + count;
    TORCH_CHECK(layers[l].length.defined() && layers[l].length.numel() == 1 &&
                    layers[l].length.scalar_type() == torch::kLong,
                "saved state: layer ", l, " has no int64 length");
    TORCH_CHECK(layers[l].length.item<int64_t>() == layers[0].length.item<int64_t>(),
                "saved state: layers at different lengths");
  }
  TORCH_CHECK(next == saved.size(), "saved state: ", saved.size(), " tensors, this model holds ",
              next);
  return layers;
}

void CausalLmImpl::LoadRow(LmState& state, int64_t row,
                           const std::vector<torch::Tensor>& saved) const {
  const std::vector<MixerState> layers = SplitSaved(state, saved);
  for (size_t l = 0; l < layers_.size(); ++l) {
    layers_[l]->mixer().LoadRow(state.layers[l], row, layers[l]);
  }
}

std::vector<torch::Tensor> CausalLmImpl::SaveRowForRollBack(const LmState& state,
                                                            int64_t row) const {
  std::vector<torch::Tensor> saved;
  for (size_t l = 0; l < layers_.size(); ++l) {
    AppendLayer(layers_[l]->mixer().SaveRowForRollBack(state.layers[l], row), saved);
  }
  return saved;
}

void CausalLmImpl::RestoreRow(LmState& state, int64_t row,
                              const std::vector<torch::Tensor>& saved) const {
  const std::vector<MixerState> layers = SplitSaved(state, saved);
  for (size_t l = 0; l < layers_.size(); ++l) {
    layers_[l]->mixer().RestoreRow(state.layers[l], row, layers[l]);
  }
}

int64_t CausalLmImpl::rollback_bytes_per_sequence(int64_t context) const {
  int64_t bytes = 0;
  for (const auto& layer : layers_) bytes += layer->mixer().rollback_bytes_per_sequence(context);
  return bytes;
}

bool CausalLmImpl::FitsInto(const LmState& state, int64_t row,
                            const std::vector<torch::Tensor>& base) const {
  const std::vector<MixerState> layers = SplitSaved(state, base);
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (!layers_[l]->mixer().FitsInto(state.layers[l], row, layers[l])) return false;
  }
  return true;
}

std::vector<torch::Tensor> CausalLmImpl::SaveRowInto(const LmState& state, int64_t row,
                                                     const std::vector<torch::Tensor>& base) const {
  const std::vector<MixerState> layers = SplitSaved(state, base);
  std::vector<torch::Tensor> saved;
  for (size_t l = 0; l < layers_.size(); ++l) {
    AppendLayer(layers_[l]->mixer().SaveRowInto(state.layers[l], row, layers[l]), saved);
  }
  return saved;
}

std::vector<torch::Tensor> CausalLmImpl::ViewOnto(const LmState& state,
                                                  const std::vector<torch::Tensor>& prefix,
                                                  const std::vector<torch::Tensor>& source,
                                                  const std::vector<torch::Tensor>& copy) const {
  const std::vector<MixerState> prefixes = SplitSaved(state, prefix);
  const std::vector<MixerState> sources = SplitSaved(state, source);
  const std::vector<MixerState> copies = SplitSaved(state, copy);
  std::vector<torch::Tensor> moved;
  for (size_t l = 0; l < layers_.size(); ++l) {
    AppendLayer(layers_[l]->mixer().ViewOnto(prefixes[l], sources[l], copies[l]), moved);
  }
  return moved;
}

void CausalLmImpl::BackFreshRows(const LmState& state, const torch::Tensor& rows,
                                 const torch::Tensor& start) const {
  if (!state.length().device().is_cpu()) return;
  const torch::Tensor fresh = rows.masked_select(start.eq(0).to(rows.device()));
  if (fresh.numel() == 0) return;
  for (size_t l = 0; l < layers_.size(); ++l) {
    layers_[l]->mixer().BackRowsForWrite(state.layers[l], fresh);
  }
}

torch::Tensor CausalLmImpl::prefill(const torch::Tensor& given, LmState& state,
                                    const torch::Tensor& slots, PrefillLogits logits,
                                    PrefillRecord* record) {
  TORCH_CHECK(given.dim() == 2, "tokens must be [batch, chunk], got ", given.sizes());
  CheckTokens(given);
  // Host tokens go to the model's device, as a step's do, and the rows are
  // checked once for every layer, which also read the pool's lengths once
  // between them (StepRows): on a GPU, a wait a layer less.
  const torch::Device device = state.length().device();
  const torch::Tensor tokens = HostToDevice(given, device);
  const torch::Tensor rows = CheckSlots(state.rows(), slots, tokens.size(0));
  const StepRows prefill_rows(rows, HostToDevice(rows, device));
  auto start = state.length().index_select(0, prefill_rows.device());
  auto positions = start.to(tokens.device()).unsqueeze(1) +
                   torch::arange(tokens.size(1), tokens.options()).unsqueeze(0);
  auto h = Embed(tokens, positions);
  BackFreshRows(state, rows, start);
  // Every layer but the last feeds all positions to the next one's state;
  // the last computes the positions whose logits are wanted.
  const int64_t chunk = tokens.size(1);
  const int64_t last_keep = logits == PrefillLogits::kAll    ? chunk
                            : logits == PrefillLogits::kLast ? 1
                                                             : 0;
  if (record != nullptr) {
    *record = PrefillRecord{rows, start, {}, {}};
    record->updates.resize(layers_.size());
  }
  LayerCarry carry;
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (record != nullptr) {
      record->inputs.push_back(h);
      carry.updates = &record->updates[l];
    }
    const int64_t keep = l + 1 == layers_.size() ? last_keep : chunk;
    h = layers_[l]->Prefill(h, state.layers[l], rows, keep, carry);
  }
  return last_keep == 0 ? torch::Tensor() : Head(h);
}

void CausalLmImpl::ReplayPrefix(const PrefillRecord& record, int64_t count, LmState& state) {
  TORCH_CHECK(record.inputs.size() == layers_.size(), "ReplayPrefix: a record of ",
              record.inputs.size(), " layers for a model of ", layers_.size());
  const int64_t chunk = record.inputs.front().size(1);
  TORCH_CHECK(count >= 0 && count <= chunk, "ReplayPrefix: ", count, " tokens of a chunk of ",
              chunk);
  const torch::Tensor lengths =
      state.length().index_select(0, record.rows.to(state.length().device()));
  TORCH_CHECK(torch::equal(lengths, record.start.to(lengths.device())),
              "ReplayPrefix: the rows are not at the lengths the recorded prefill started from");
  if (count == 0) return;
  // A layer replayed by its prefill may need the carry the ones below
  // compute, so the updates alone serve only when every layer kept them.
  const bool every_layer_kept =
      record.updates.size() == layers_.size() &&
      std::none_of(record.updates.begin(), record.updates.end(),
                   [](const std::vector<torch::Tensor>& kept) { return kept.empty(); });
  if (every_layer_kept) {
    for (size_t l = 0; l < layers_.size(); ++l) {
      TORCH_CHECK(
          layers_[l]->mixer().ReplayUpdates(record.updates[l], state.layers[l], record.rows, count),
          "ReplayPrefix: layer ", l, " kept updates it cannot replay");
    }
    return;
  }
  // Layer 0 computes the carry (RWKV-7's first values) for these positions
  // again, as a prefill of them would.
  LayerCarry carry;
  for (size_t l = 0; l < layers_.size(); ++l) {
    layers_[l]->Prefill(record.inputs[l].narrow(1, 0, count), state.layers[l], record.rows, 0,
                        carry);
  }
}

torch::Tensor CausalLmImpl::step(const torch::Tensor& tokens, const torch::Tensor& slots,
                                 LmState& state) {
  TORCH_CHECK(tokens.dim() == 1, "tokens must be [batch], got ", tokens.sizes());
  CheckTokens(tokens);
  const int64_t batch = tokens.size(0);
  const int64_t groups = row_groups_ ? RowGroups(batch, tokens) : 1;
  if (groups == 1) {
    // The rows are checked and copied to the device once for every layer
    // (model/mixers/step_rows.h): from host ids and tokens, a GPU step
    // queues its work without waiting for the GPU.
    TORCH_CHECK(!state.layers.empty() && state.length().defined(),
                "the state is empty; call initial_state first");
    const torch::Device device = state.length().device();
    const torch::Tensor host = CheckSlots(state.rows(), slots, batch);
    const StepRows rows(host, HostToDevice(host, device));
    return StepChecked(HostToDevice(tokens, device), rows, state);
  }
  const torch::Tensor rows =
      slots.defined() ? slots.to(torch::kLong) : torch::arange(batch, torch::kLong);
  std::vector<torch::Tensor> hidden(groups);
  ForEachRowGroup(batch, groups, [&](int64_t g, int64_t first, int64_t count) {
    hidden[g] = StepLayers(tokens.narrow(0, first, count), rows.narrow(0, first, count), state);
  });
  // The head runs once on all rows: its product is the step's largest and
  // splits well across the threads by itself.
  return Head(torch::cat(hidden));
}

torch::Tensor CausalLmImpl::StepChecked(const torch::Tensor& tokens, const StepRows& rows,
                                        LmState& state) {
  return Head(StepLayers(tokens, rows.device(), state));
}

torch::Tensor CausalLmImpl::StepLayers(const torch::Tensor& tokens, const torch::Tensor& slots,
                                       LmState& state) {
  torch::Tensor positions;
  if (config_.positions != PositionKind::kNone) {
    auto rows =
        slots.defined() ? slots.to(torch::kLong) : torch::arange(tokens.size(0), torch::kLong);
    positions =
        state.length().index_select(0, rows.to(state.length().device())).to(tokens.device());
  }
  auto h = Embed(tokens, positions, StepRows::RoomCheckedByCaller(slots));
  LayerCarry carry;
  for (size_t l = 0; l < layers_.size(); ++l)
    h = layers_[l]->Step(h, state.layers[l], slots, carry);
  return h;
}

int64_t CausalLmImpl::max_context() const {
  int64_t limit = config_.positions == PositionKind::kLearned ? config_.max_context : -1;
  for (const auto& layer : layers_) {
    const int64_t m = layer->mixer().max_context();
    if (m >= 0) limit = limit < 0 ? m : std::min(limit, m);
  }
  return limit;
}

int64_t CausalLmImpl::state_bytes_per_sequence(int64_t context) const {
  int64_t bytes = 0;
  for (const auto& layer : layers_) bytes += layer->mixer().state_bytes_per_sequence(context);
  return bytes;
}

int64_t CausalLmImpl::parameter_count() const {
  int64_t count = 0;
  for (const auto& p : parameters()) count += p.numel();
  return count;
}

namespace {
bool IsDenseWeight(const std::string& name, const torch::Tensor& p) {
  return p.dim() == 2 && absl::EndsWith(name, "weight");
}
}  // namespace

void CausalLmImpl::CheckDenseWeightsFinite(const char* format) const {
  for (const auto& p : named_parameters()) {
    TORCH_CHECK(!IsDenseWeight(p.key(), p.value()) || torch::isfinite(p.value()).all().item<bool>(),
                "weight ", p.key(), " is not finite; ", format, " needs finite weights");
  }
}

int64_t CausalLmImpl::QuantizeInt8() {
  CheckDenseWeightsFinite("int8");
  int64_t bytes = 0;
  for (const auto& p : named_parameters()) {
    if (IsDenseWeight(p.key(), p.value())) bytes += QuantizeWeightInt8(p.value());
  }
  ChooseRowGroups();
  return bytes;
}

int64_t CausalLmImpl::QuantizeBf16(Bf16Product product) {
  CheckDenseWeightsFinite("bf16");
  int64_t bytes = 0;
  for (const auto& p : named_parameters()) {
    if (IsDenseWeight(p.key(), p.value())) bytes += QuantizeWeightBf16(p.value(), product);
  }
  if (product == Bf16Product::kLibTorch || !embedding_->weight.is_cpu()) DropDenseFloatValues();
  ChooseRowGroups();
  return bytes;
}

void CausalLmImpl::DropDenseFloatValues() {
  // Only Dense multiplies these outside autograd (the embedding is also
  // looked up, and Embed widens its rows); other 2-D weights (a learned
  // position table) keep their float32 values.
  std::vector<torch::Tensor> weights = {embedding_->weight};
  if (head_.defined()) weights.push_back(head_);
  for (const auto& module : modules(/*include_self=*/false)) {
    if (const auto* linear = module->as<torch::nn::Linear>()) weights.push_back(linear->weight);
  }
  for (const torch::Tensor& weight : weights) DropFloatValues(weight);
}

bool CausalLmImpl::has_int8_weights() const {
  for (const auto& p : named_parameters()) {
    if (IsDenseWeight(p.key(), p.value()) && HasInt8Copy(p.value())) return true;
  }
  return false;
}

absl::StatusOr<int64_t> QuantizeInt8(CausalLm& model) {
  try {
    return model->QuantizeInt8();
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(e.what_without_backtrace());
  }
}

absl::StatusOr<int64_t> QuantizeBf16(CausalLm& model) {
  try {
    return model->QuantizeBf16();
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(e.what_without_backtrace());
  }
}

int64_t CausalLmImpl::dense_weight_bytes() const {
  int64_t bytes = 0;
  for (const auto& p : named_parameters()) {
    if (IsDenseWeight(p.key(), p.value())) bytes += p.value().numel() * p.value().element_size();
  }
  return bytes;
}

void CausalLmImpl::ChooseRowGroups() {
  int64_t bytes = 0;
  bool copies = false;  // int8 or bf16 copies, which the products read instead
  for (const auto& layer : layers_) {
    for (const auto& p : layer->named_parameters()) {
      const torch::Tensor& t = p.value();
      bytes += t.numel() * t.element_size();
      copies |= IsDenseWeight(p.key(), t) && (HasInt8Copy(t) || HasBf16Copy(t));
    }
  }
  row_groups_ = copies || bytes <= kMaxGroupedWeightBytes;
  for (const auto& layer : layers_) layer->set_row_groups(row_groups_);
}

double MinimumTensorElements(const LmConfig& config) {
  const double vocab = static_cast<double>(config.vocab_size);
  const double d = static_cast<double>(config.d_model);
  const double ff = static_cast<double>(config.ff_hidden);
  const double context = static_cast<double>(config.max_context);
  const double window = static_cast<double>(config.window);
  // Every mixer projects to queries, keys and values and back (4 d^2); the
  // feed-forward's two matrices are d x ff_hidden.
  double per_layer = 4 * d * d + 2 * d * ff;
  switch (config.mixer) {
    case MixerKind::kAftFull:  // a max_context x max_context bias
      per_layer += context * context;
      break;
    case MixerKind::kAftLocal:  // a band of `window` per position
      per_layer += context * window;
      break;
    case MixerKind::kAftConv:
    case MixerKind::kAftDecay:  // a filter of `window` taps
      per_layer += window;
      break;
    case MixerKind::kRelative:  // a table of max_context distances
      per_layer += context * d;
      break;
    case MixerKind::kMamba2: {  // no feed-forward: in_proj (> 2 I d) and out_proj (I d)
      const double inner = static_cast<double>(config.mamba2.expand) * d;
      per_layer = 3 * inner * d;
      break;
    }
    default:
      break;
  }
  // Grouped-query attention may project to fewer keys and values: q and
  // the output alone are 2 d^2.
  if (config.has_attention()) per_layer = std::min(per_layer, 2 * d * d + 2 * d * ff);
  double total = vocab * d + static_cast<double>(config.layers) * per_layer;
  if (!config.tie_embeddings) total += vocab * d;
  if (config.positions == PositionKind::kLearned) total += context * d;
  return total;
}

}  // namespace attn
