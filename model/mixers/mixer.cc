#include "model/mixers/mixer.h"

#include <sys/mman.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "model/mixers/aft.h"
#include "model/mixers/aft_decay.h"
#include "model/mixers/grouped_attention.h"
#include "model/mixers/linear_attention.h"
#include "model/mixers/mamba2.h"
#include "model/mixers/multi_head_attention.h"
#include "model/mixers/relative_attention.h"
#include "model/mixers/rwkv4.h"
#include "model/mixers/rwkv7.h"
#include "model/mixers/short_conv.h"
#include "model/mixers/state_pool.h"
#include "model/mixers/step_rows.h"

namespace attn {
int64_t MixerState::bytes_per_row() const {
  int64_t bytes = 0;
  for (const auto& t : tensors) {
    if (t.size(0) > 0) bytes += t.numel() / t.size(0) * static_cast<int64_t>(t.element_size());
  }
  return bytes + static_cast<int64_t>(sizeof(int64_t));  // the length
}

MixerState GatherState(const MixerState& pool, const torch::Tensor& slots) {
  MixerState part;
  auto index = slots.to(pool.length.device());
  part.length = pool.length.index_select(0, index);
  for (const auto& t : pool.tensors)
    part.tensors.push_back(t.index_select(0, index.to(t.device())));
  return part;
}

void ScatterState(MixerState& pool, const torch::Tensor& slots, const MixerState& part) {
  TORCH_CHECK(pool.tensors.size() == part.tensors.size(),
              "ScatterState: states of different kinds");
  auto index = slots.to(pool.length.device());
  pool.length.index_copy_(0, index, part.length);
  for (size_t i = 0; i < pool.tensors.size(); ++i) {
    auto& t = pool.tensors[i];
    t.index_copy_(0, index.to(t.device()), part.tensors[i]);
  }
}

void AdvanceRows(MixerState& state, const torch::Tensor& rows, int64_t tokens) {
  state.length.index_add_(0, RowsOn(rows, state.length.device()),
                          torch::full({rows.size(0)}, tokens, state.length.options()));
}

namespace {

// Ring slots of the entries held before length `end`, oldest first.
torch::Tensor HeldRingSlots(int64_t window, int64_t end, const torch::TensorOptions& options) {
  const int64_t count = std::min(window, end);
  return torch::arange(end - count, end, options).remainder(std::max<int64_t>(window, 1));
}

}  // namespace

WindowRows GatherWindowRows(const MixerState& state, const torch::Tensor& index, int64_t window,
                            int64_t start) {
  auto held = HeldRingSlots(window, start, index.options());
  WindowRows rows;
  for (int i = 0; i < 5; ++i) rows[i] = state.tensors[i].index_select(0, index);
  for (int i = 3; i < 5; ++i) rows[i] = rows[i].index_select(1, held);
  return rows;
}

void ScatterWindowRows(MixerState& state, const torch::Tensor& index, int64_t window, int64_t end,
                       const WindowRows& rows) {
  auto held = HeldRingSlots(window, end, index.options());
  for (int i = 0; i < 5; ++i) {
    auto updated = rows[i];
    if (i >= 3) {  // the entries that left the ring stay as they were
      updated = state.tensors[i].index_select(0, index).index_copy_(1, held, rows[i]);
    }
    state.tensors[i].index_copy_(0, index, updated);
  }
}

void SequenceMixer::ResetSlots(MixerState& state, const torch::Tensor& slots) const {
  // A state whose empty row is zeros gives its rows' memory back instead
  // of being written with zeros (which would back every page).
  if (ReleasePooledRows(state, slots)) return;
  ScatterState(state, slots, initial_state(slots.size(0), state.length.device()));
}

namespace {

// Backs the memory a copy into `view` will write, one call per contiguous
// run of its last two dims, instead of one page fault per page. A row loaded
// from the state cache lands in a key/value cache row whose pages were given
// back when its last sequence ended (state_pool.h): at 3,000 tokens of
// LFM2-350M that is about 18,000 fresh pages, and faulting them one by one
// cost more than the copy itself. Best effort: where MADV_POPULATE_WRITE is
// missing (Linux before 5.14) the copy faults its pages as before.
void PopulateForWrite(const torch::Tensor& view) {
  if (!view.device().is_cpu() || view.dim() < 2 || view.numel() == 0) return;
  const int64_t inner = view.size(-1);
  if (view.stride(-1) != 1 || (view.size(-2) > 1 && view.stride(-2) != inner)) return;
  static const int64_t page = sysconf(_SC_PAGESIZE);
  const int64_t run = view.size(-2) * inner * static_cast<int64_t>(view.element_size());
  if (run < 4 * page) return;  // a few faults cost less than the call
  const int64_t runs = view.numel() / (view.size(-2) * inner);
  auto* base = static_cast<char*>(view.data_ptr());
  for (int64_t r = 0; r < runs; ++r) {
    int64_t offset = 0;  // elements from base to run r, over the outer dims
    for (int64_t d = view.dim() - 3, rest = r; d >= 0; --d) {
      offset += rest % view.size(d) * view.stride(d);
      rest /= view.size(d);
    }
    const auto begin = reinterpret_cast<uintptr_t>(base + offset * view.element_size());
    const uintptr_t first_page = begin / page * page;
    if (madvise(reinterpret_cast<void*>(first_page), begin + run - first_page,
                MADV_POPULATE_WRITE) != 0) {
      return;
    }
  }
}

}  // namespace

MixerState SequenceMixer::SaveRow(const MixerState& state, int64_t row, int64_t room) const {
  TORCH_CHECK(row >= 0 && row < state.rows(), "SaveRow: row ", row, " of ", state.rows());
  const HeldPositions held = held_positions();
  MixerState saved;
  saved.length = state.length.narrow(0, row, 1).clone();
  const int64_t count = held.Count(saved.length.item<int64_t>());
  for (size_t i = 0; i < state.tensors.size(); ++i) {
    torch::Tensor t = state.tensors[i].narrow(0, row, 1);
    if (held.dim < 0 || i < held.first) {
      saved.tensors.push_back(t.clone());
      continue;
    }
    const int64_t capacity = std::min(count + std::max<int64_t>(room, 0), t.size(held.dim));
    t = t.narrow(held.dim, 0, count);
    if (capacity == count) {
      saved.tensors.push_back(t.clone());
      continue;
    }
    std::vector<int64_t> sizes = t.sizes().vec();
    sizes[held.dim] = capacity;
    torch::Tensor copy = torch::empty(sizes, t.options()).narrow(held.dim, 0, count);
    PopulateForWrite(copy);
    saved.tensors.push_back(copy.copy_(t));
  }
  return saved;
}

namespace {

// Whether the view `t` can grow to `count` entries along `dim` inside its
// memory: the grown entries stay clear of the next index of every outer dim
// and of the storage's end.
bool HasRoom(const torch::Tensor& t, int64_t dim, int64_t count) {
  const int64_t step = t.stride(dim);
  if (step <= 0 || t.size(dim) > count) return false;
  int64_t last = t.storage_offset() + (count - 1) * step;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d == dim || t.size(d) < 1) continue;
    last += (t.size(d) - 1) * t.stride(d);
    if (d < dim && t.size(d) > 1 && count * step > t.stride(d)) return false;
    if (d > dim && (t.size(d) - 1) * t.stride(d) >= step) return false;
  }
  return last < static_cast<int64_t>(t.storage().nbytes() / t.element_size());
}

}  // namespace

bool SequenceMixer::FitsInto(const MixerState& state, int64_t row, const MixerState& base) const {
  const HeldPositions held = held_positions();
  if (held.dim < 0) return true;  // nothing grows: every tensor is copied
  if (base.tensors.size() != state.tensors.size() || !base.length.defined()) return false;
  const int64_t length = state.length[row].item<int64_t>();
  const int64_t from = base.length.item<int64_t>();
  if (!AppendOnly() || from > length) return false;
  for (size_t i = held.first; i < base.tensors.size(); ++i) {
    if (!HasRoom(base.tensors[i], held.dim, length)) return false;
  }
  return true;
}

MixerState SequenceMixer::SaveRowInto(const MixerState& state, int64_t row,
                                      const MixerState& base) const {
  TORCH_CHECK(row >= 0 && row < state.rows(), "SaveRowInto: row ", row, " of ", state.rows());
  TORCH_CHECK(FitsInto(state, row, base), "SaveRowInto: no room behind the saved row");
  const HeldPositions held = held_positions();
  MixerState saved;
  saved.length = state.length.narrow(0, row, 1).clone();
  const int64_t length = saved.length.item<int64_t>();
  const int64_t from = base.length.item<int64_t>();
  for (size_t i = 0; i < state.tensors.size(); ++i) {
    const torch::Tensor t = state.tensors[i].narrow(0, row, 1);
    if (held.dim < 0 || i < held.first) {
      saved.tensors.push_back(t.clone());
      continue;
    }
    const torch::Tensor& b = base.tensors[i];
    std::vector<int64_t> sizes = b.sizes().vec();
    sizes[held.dim] = length;
    torch::Tensor grown = b.as_strided(sizes, b.strides(), b.storage_offset());
    grown.narrow(held.dim, from, length - from).copy_(t.narrow(held.dim, from, length - from));
    saved.tensors.push_back(grown);
  }
  return saved;
}

namespace {

// Whether `b` has `a`'s shape but for as many or more entries along `dim`.
bool AtLeastAsLong(const torch::Tensor& a, const torch::Tensor& b, int64_t dim) {
  if (!a.defined() || !b.defined() || a.dim() != b.dim()) return false;
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (d == dim ? a.size(d) > b.size(d) : a.size(d) != b.size(d)) return false;
  }
  return true;
}

// Whether `a` views the memory of `b` as its first entries along `dim`.
bool ViewsStartOf(const torch::Tensor& a, const torch::Tensor& b, int64_t dim) {
  return AtLeastAsLong(a, b, dim) && a.storage().is_alias_of(b.storage()) &&
         a.storage_offset() == b.storage_offset() && a.strides() == b.strides();
}

}  // namespace

MixerState SequenceMixer::ViewOnto(const MixerState& prefix, const MixerState& source,
                                   const MixerState& copy) const {
  MixerState moved = prefix;
  if (!AppendOnly() || prefix.tensors.size() != source.tensors.size() ||
      prefix.tensors.size() != copy.tensors.size()) {
    return moved;
  }
  const int64_t dim = held_positions().dim;
  for (size_t i = 0; i < prefix.tensors.size(); ++i) {
    const torch::Tensor& p = prefix.tensors[i];
    const torch::Tensor& c = copy.tensors[i];
    if (ViewsStartOf(p, source.tensors[i], dim) && AtLeastAsLong(p, c, dim)) {
      moved.tensors[i] = c.narrow(dim, 0, p.size(dim));
    }
  }
  return moved;
}

MixerState SequenceMixer::SaveRowForRollBack(const MixerState& state, int64_t row) const {
  if (!AppendOnly()) return SaveRow(state, row);
  TORCH_CHECK(row >= 0 && row < state.rows(), "SaveRowForRollBack: row ", row, " of ",
              state.rows());
  MixerState saved;
  saved.length = state.length.narrow(0, row, 1).clone();
  const int64_t dim = held_positions().dim;
  for (const torch::Tensor& t : state.tensors) {
    saved.tensors.push_back(t.narrow(0, row, 1).narrow(dim, 0, 0).clone());
  }
  return saved;
}

void SequenceMixer::RestoreRow(MixerState& state, int64_t row, const MixerState& saved) const {
  if (!AppendOnly()) {
    LoadRow(state, row, saved);
    return;
  }
  TORCH_CHECK(row >= 0 && row < state.rows(), "RestoreRow: row ", row, " of ", state.rows());
  TORCH_CHECK(saved.length.defined() && saved.length.numel() == 1 &&
                  saved.length.scalar_type() == torch::kLong,
              "saved state: expected one int64 length");
  const int64_t length = saved.length.item<int64_t>();
  const int64_t now = state.length[row].item<int64_t>();
  TORCH_CHECK(length >= 0 && length <= now, "RestoreRow: a copy at length ", length,
              " cannot come from row ", row, ", which holds ", now);
  state.length.narrow(0, row, 1).fill_(length);
}

void SequenceMixer::LoadRow(MixerState& state, int64_t row, const MixerState& saved) const {
  TORCH_CHECK(row >= 0 && row < state.rows(), "LoadRow: row ", row, " of ", state.rows());
  TORCH_CHECK(saved.length.defined() && saved.length.dim() == 1 && saved.length.size(0) == 1 &&
                  saved.length.scalar_type() == torch::kLong,
              "saved state: expected one int64 length");
  const int64_t length = saved.length.item<int64_t>();
  const int64_t limit = max_context();
  TORCH_CHECK(length >= 0 && (limit < 0 || length <= limit), "saved state: length ", length,
              " outside 0..", limit < 0 ? std::string("unbounded") : std::to_string(limit));
  TORCH_CHECK(saved.tensors.size() == state.tensors.size(), "saved state: ", saved.tensors.size(),
              " tensors, this mixer holds ", state.tensors.size());
  const HeldPositions held = held_positions();
  const int64_t count = held.Count(length);
  auto held_dim = [&](size_t i, int64_t d) { return d == held.dim && i >= held.first; };
  for (size_t i = 0; i < state.tensors.size(); ++i) {
    const torch::Tensor& want = state.tensors[i];
    const torch::Tensor& got = saved.tensors[i];
    TORCH_CHECK(got.defined() && got.scalar_type() == want.scalar_type() && got.dim() == want.dim(),
                "saved state: tensor ", i, " has the wrong dtype or rank");
    for (int64_t d = 0; d < want.dim(); ++d) {
      const int64_t expected = d == 0 ? 1 : held_dim(i, d) ? count : want.size(d);
      TORCH_CHECK(got.size(d) == expected, "saved state: tensor ", i, " has shape ", got.sizes(),
                  ", expected size ", expected, " in dim ", d);
    }
  }
  for (size_t i = 0; i < state.tensors.size(); ++i) {
    torch::Tensor target = state.tensors[i].narrow(0, row, 1);
    if (held.dim >= 0 && i >= held.first) {
      target = target.narrow(held.dim, 0, count);
      PopulateForWrite(target);
    }
    target.copy_(saved.tensors[i]);
  }
  state.length.narrow(0, row, 1).copy_(saved.length);
}

void SequenceMixer::BackRowsForWrite(const MixerState& state, const torch::Tensor& rows) const {
  if (!state.length.device().is_cpu() || rows.numel() == 0) return;
  const HeldPositions held = held_positions();
  const torch::Tensor ids = rows.to(torch::kCPU, torch::kLong).contiguous();
  for (size_t i = 0; i < state.tensors.size(); ++i) {
    if (held.dim >= 0 && i >= held.first) continue;
    for (int64_t r = 0; r < ids.numel(); ++r) {
      PopulateForWrite(state.tensors[i].narrow(0, ids.data_ptr<int64_t>()[r], 1));
    }
  }
}

torch::Tensor SequenceMixer::ResolveSlots(const MixerState& state, const torch::Tensor& slots,
                                          int64_t batch) const {
  TORCH_CHECK(state.length.defined(), "mixer state is empty; call initial_state first");
  // The model checked its step's rows once for every layer.
  if (const StepRows* step = StepRows::Current(); step != nullptr && step->Names(slots)) {
    TORCH_CHECK(step->host().size(0) == batch, "slots must be int64 [", batch, "], got ",
                step->host().sizes());
    return step->host();
  }
  return CheckSlots(state.rows(), slots, batch);
}

namespace {

// Throws unless rows ids[0..batch) (null: rows 0..batch-1) of lengths can
// take `tokens` more tokens under `limit` (-1: unbounded).
void CheckRowCapacity(const MixerOptions& options, int64_t limit, const int64_t* lengths,
                      const int64_t* ids, int64_t batch, int64_t tokens) {
  if (limit < 0) return;
  int64_t longest = 0;
  for (int64_t b = 0; b < batch; ++b) longest = std::max(longest, lengths[ids ? ids[b] : b]);
  TORCH_CHECK(longest + tokens <= limit, MixerKindName(options.kind), " mixer holds at most ",
              limit, " tokens per sequence; a sequence at ", longest, " cannot take ", tokens,
              " more");
}

}  // namespace

void SequenceMixer::CheckCapacity(const MixerState& state, const torch::Tensor& slots,
                                  int64_t tokens) const {
  // A recurrence holds any length: no reason to read the lengths, which on a
  // GPU would wait for it. Nor when the step's caller checked them.
  if (max_context() < 0 || StepRows::RoomCheckedByCaller(slots)) return;
  const StepRows* step = StepRows::Current();
  if (step != nullptr && !step->Names(slots)) step = nullptr;
  const torch::Tensor lengths =
      step != nullptr ? step->HostLengths(state.length) : state.length.to(torch::kCPU).contiguous();
  CheckRowCapacity(options_, max_context(), lengths.data_ptr<int64_t>(), slots.data_ptr<int64_t>(),
                   slots.size(0), tokens);
}

const int64_t* SequenceMixer::PrepareFusedStep(const MixerState& state, const torch::Tensor& slots,
                                               int64_t batch, torch::Tensor* holder) const {
  const int64_t* ids = nullptr;
  if (slots.defined()) {
    *holder = ResolveSlots(state, slots, batch);
    ids = holder->data_ptr<int64_t>();
  } else {
    TORCH_CHECK(state.length.defined(), "mixer state is empty; call initial_state first");
    TORCH_CHECK(batch <= state.rows(), "batch of ", batch, " sequences but the state has ",
                state.rows(), " rows");
  }
  CheckRowCapacity(options_, max_context(), state.length.data_ptr<int64_t>(), ids, batch, 1);
  return ids;
}

int64_t SequenceMixer::CommonLength(const MixerState& state, const torch::Tensor& slots) const {
  if (slots.size(0) == 0) return 0;
  const StepRows* step = StepRows::Current();
  const auto lengths = (step != nullptr && step->Names(slots) ? step->HostLengths(state.length)
                                                              : state.length.to(torch::kCPU))
                           .index_select(0, slots);
  const int64_t first = lengths[0].item<int64_t>();
  TORCH_CHECK(lengths.eq(first).all().item<bool>(),
              "prefill needs every sequence of the batch at the same length");
  return first;
}

bool SequenceMixer::CanFuse(const torch::Tensor& x, const MixerState& state) const {
  if (!options_.fused_kernels || !x.device().is_cpu() || x.scalar_type() != torch::kFloat) {
    return false;
  }
  if (torch::GradMode::is_enabled()) {
    if (x.requires_grad()) return false;
    for (const auto& parameter : parameters()) {
      if (parameter.requires_grad()) return false;
    }
  }
  for (const auto& t : state.tensors) {
    if (!t.device().is_cpu() || t.scalar_type() != torch::kFloat || !t.is_contiguous()) {
      return false;
    }
  }
  return state.length.device().is_cpu() && state.length.is_contiguous();
}

torch::Tensor SequenceMixer::prefill(const torch::Tensor& x, MixerState& state,
                                     const torch::Tensor& slots) {
  return prefill_last(x, state, slots, x.dim() == 3 ? x.size(1) : 0);  // it checks x's shape
}

torch::Tensor SequenceMixer::prefill_last(const torch::Tensor& x, MixerState& state,
                                          const torch::Tensor& slots, int64_t keep) {
  TORCH_CHECK(x.dim() == 3 && x.size(2) == options_.d_model, "prefill expects x [B, C, ",
              options_.d_model, "], got ", x.sizes());
  TORCH_CHECK(keep >= 0 && keep <= x.size(1), "prefill_last keeps 0 to ", x.size(1),
              " outputs, got ", keep);
  return Prefill(x, state, slots, keep);
}

std::shared_ptr<SequenceMixer> MakeMixer(const MixerOptions& options) {
  TORCH_CHECK(options.d_model > 0, "d_model must be positive");
  TORCH_CHECK(options.heads > 0 && options.d_model % options.heads == 0, "d_model (",
              options.d_model, ") must be divisible by heads (", options.heads, ")");
  TORCH_CHECK(options.chunk > 0, "chunk must be positive");
  switch (options.kind) {
    case MixerKind::kMha:
    case MixerKind::kMhaAlibi:
      return std::make_shared<MultiHeadAttentionImpl>(options);
    case MixerKind::kRelative:
      return std::make_shared<RelativeMultiHeadAttentionImpl>(options);
    case MixerKind::kLinearElu:
    case MixerKind::kLinearExp:
    case MixerKind::kLinearDecay:
      return std::make_shared<LinearAttentionImpl>(options);
    case MixerKind::kAftFull:
    case MixerKind::kAftLocal:
    case MixerKind::kAftSimple:
    case MixerKind::kAftConv:
      return std::make_shared<AftImpl>(options);
    case MixerKind::kAftDecay:
      return std::make_shared<AftDecayImpl>(options);
    case MixerKind::kRwkv7:
      return std::make_shared<Rwkv7Impl>(options);
    case MixerKind::kRwkv4:
      return std::make_shared<Rwkv4Impl>(options);
    case MixerKind::kMamba2:
      return std::make_shared<Mamba2Impl>(options);
    case MixerKind::kShortConv:
      return std::make_shared<ShortConvImpl>(options);
    case MixerKind::kGqa:
      return std::make_shared<GroupedAttentionImpl>(options);
  }
  TORCH_CHECK(false, "unknown mixer kind");
}

}  // namespace attn
