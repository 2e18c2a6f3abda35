#include "train/trainer.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "model/lm/model_package.h"

namespace attn {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read corpus file ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::Status CheckOptions(const TrainOptions& o) {
  if (o.corpus_files.empty()) return absl::InvalidArgumentError("no corpus files given");
  if (o.seq_len < 2 || o.batch < 1 || o.steps < 1) {
    return absl::InvalidArgumentError("seq_len must be >= 2, batch and steps >= 1");
  }
  if (!(o.heldout_fraction > 0 && o.heldout_fraction < 0.5)) {
    return absl::InvalidArgumentError("heldout_fraction must be in (0, 0.5)");
  }
  int64_t previous = 0;
  for (const auto& stage : o.length_stages) {
    if (stage.seq_len < 2 || stage.until <= previous) {
      return absl::InvalidArgumentError(
          absl::StrCat("curriculum stage ", stage.seq_len, ":", stage.until,
                       ": lengths must be >= 2 and stages must end at increasing steps"));
    }
    previous = stage.until;
  }
  return o.model.Validate();
}

// The longest sequence any step uses.
int64_t LongestSeqLen(const TrainOptions& o) {
  int64_t longest = o.length_stages.empty() ? o.seq_len : 0;
  for (const auto& stage : o.length_stages) longest = std::max(longest, stage.seq_len);
  return longest;
}

std::string OptimizerPath(const std::string& dir) {
  return (fs::path(dir) / "optimizer.pt").string();
}
std::string ModelPath(const std::string& dir) { return (fs::path(dir) / "model.pt").string(); }
std::string StepPath(const std::string& dir) { return (fs::path(dir) / "step.txt").string(); }

}  // namespace

Trainer::Trainer(const TrainOptions& options, Tokenizer tokenizer, CausalLm model)
    : options_(options),
      tokenizer_(std::make_unique<Tokenizer>(std::move(tokenizer))),
      model_(std::move(model)) {
  optimizer_ = std::make_unique<torch::optim::AdamW>(
      model_->parameters(),
      torch::optim::AdamWOptions(options.lr).weight_decay(options.weight_decay));
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainOptions& options) {
  if (auto status = CheckOptions(options); !status.ok()) return status;
  TokenizerTrainOptions tokenizer_options;
  tokenizer_options.input_files = options.corpus_files;
  tokenizer_options.vocab_size = static_cast<int>(options.model.vocab_size);
  tokenizer_options.seed = static_cast<int>(options.seed);
  auto tokenizer = Tokenizer::Train(tokenizer_options);
  if (!tokenizer.ok()) return tokenizer.status();
  torch::manual_seed(options.seed);
  CausalLm model(options.model);
  std::unique_ptr<Trainer> trainer(new Trainer(options, std::move(*tokenizer), model));
  if (auto status = trainer->LoadCorpus(); !status.ok()) return status;
  return trainer;
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Resume(const TrainOptions& options) {
  const std::string& dir = options.checkpoint_dir;
  auto package = LoadPackage(ModelPath(dir));
  if (!package.ok()) return package.status();
  auto tokenizer = PackageTokenizer(*package);
  if (!tokenizer.ok()) return tokenizer.status();
  TrainOptions resumed = options;
  resumed.model = package->model->config();
  if (auto status = CheckOptions(resumed); !status.ok()) return status;
  package->model->train();
  std::unique_ptr<Trainer> trainer(new Trainer(resumed, std::move(*tokenizer), package->model));
  std::ifstream step_file(StepPath(dir));
  if (!(step_file >> trainer->step_)) {
    return absl::DataLossError(absl::StrCat("checkpoint ", dir, " has no readable step.txt"));
  }
  try {
    torch::load(*trainer->optimizer_, OptimizerPath(dir));
  } catch (const c10::Error& e) {
    return absl::DataLossError(absl::StrCat("checkpoint ", dir, ": cannot read optimizer state"));
  }
  if (auto status = trainer->LoadCorpus(); !status.ok()) return status;
  return trainer;
}

std::vector<std::pair<int64_t, int64_t>> PositionSegments(int64_t seq_len) {
  std::vector<std::pair<int64_t, int64_t>> segments;
  int64_t begin = 0;
  for (int64_t end = 128; begin < seq_len; end *= 2) {
    segments.emplace_back(begin, std::min(end, seq_len));
    begin = end;
  }
  return segments;
}

absl::Status Trainer::LoadCorpus() {
  std::vector<int64_t> ids;
  for (const auto& file : options_.corpus_files) {
    auto text = ReadFile(file);
    if (!text.ok()) return text.status();
    auto encoded = tokenizer_->Encode(*text);
    ids.insert(ids.end(), encoded.begin(), encoded.end());
    ids.push_back(tokenizer_->eos_id());  // documents end with </s>
  }
  const auto total = static_cast<int64_t>(ids.size());
  const auto heldout = static_cast<int64_t>(total * options_.heldout_fraction);
  const int64_t longest = LongestSeqLen(options_);
  if (heldout < longest + 1 || total - heldout < longest + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the corpus has ", total, " tokens: too few for seq_len ", longest,
        " with a held-out share of ", options_.heldout_fraction, "; add text or shorten seq_len"));
  }
  auto stream = [&](int64_t begin, int64_t count) {
    Stream s{torch::tensor(std::vector<int64_t>(ids.begin() + begin, ids.begin() + begin + count),
                           torch::kLong),
             {}};
    for (int64_t i = 0; i < count; ++i) {
      if (ids[begin + i] == tokenizer_->eos_id() || i == count - 1) s.ends.push_back(i);
    }
    return s;
  };
  train_ = stream(0, total - heldout);
  heldout_ = stream(total - heldout, heldout);
  return absl::OkStatus();
}

absl::StatusOr<std::pair<torch::Tensor, torch::Tensor>> Trainer::Batch(
    const Stream& stream, int64_t seq_len, int64_t batch, torch::Generator& generator) const {
  // Window starts per document: s with s + seq_len at or before its end.
  std::vector<int64_t> first_start, starts_before;  // per document
  int64_t begin = 0, count = 0;
  for (int64_t end : stream.ends) {
    first_start.push_back(begin);
    starts_before.push_back(count);
    count += std::max<int64_t>(0, end - begin - seq_len + 1);
    begin = end + 1;
  }
  if (count == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("no document of the corpus holds ", seq_len + 1,
                     " tokens; train on longer documents or shorten the curriculum's sequences"));
  }
  auto picks = torch::randint(count, {batch}, generator, torch::kLong);
  auto starts = torch::empty({batch}, torch::kLong);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t pick = picks[b].item<int64_t>();
    const auto doc = std::upper_bound(starts_before.begin(), starts_before.end(), pick) -
                     starts_before.begin() - 1;
    starts[b] = first_start[doc] + pick - starts_before[doc];
  }
  auto offsets = torch::arange(seq_len + 1, torch::kLong);
  auto windows = stream.tokens.index({starts.unsqueeze(1) + offsets.unsqueeze(0)});
  return std::make_pair(windows.narrow(1, 0, seq_len), windows.narrow(1, 1, seq_len));
}

int64_t Trainer::SeqLenAt(int64_t step) const {
  for (const auto& stage : options_.length_stages) {
    if (step <= stage.until) return stage.seq_len;
  }
  return options_.length_stages.empty() ? options_.seq_len : options_.length_stages.back().seq_len;
}

int64_t Trainer::BatchAt(int64_t step) const {
  return std::max<int64_t>(1, options_.batch * options_.seq_len / SeqLenAt(step));
}

double Trainer::LearningRate(int64_t step) const {
  if (step <= options_.warmup) return options_.lr * step / std::max<int64_t>(options_.warmup, 1);
  const double progress = static_cast<double>(step - options_.warmup) /
                          std::max<int64_t>(options_.steps - options_.warmup, 1);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * std::min(progress, 1.0)));
  return options_.lr * (options_.min_lr_ratio + (1.0 - options_.min_lr_ratio) * cosine);
}

absl::StatusOr<double> Trainer::TrainStep() {
  const int64_t step = step_ + 1;
  auto generator = at::detail::createCPUGenerator(options_.seed * 1000003 + step);
  auto batch = Batch(train_, SeqLenAt(step), BatchAt(step), generator);
  if (!batch.ok()) return batch.status();
  auto& [inputs, targets] = *batch;
  const double lr = LearningRate(step);
  for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
  optimizer_->zero_grad();
  auto logits = model_->forward(inputs);
  auto loss = torch::nn::functional::cross_entropy(logits.flatten(0, 1), targets.flatten());
  loss.backward();
  torch::nn::utils::clip_grad_norm_(model_->parameters(), options_.grad_clip);
  optimizer_->step();
  step_ = step;
  return loss.item<double>();
}

double Trainer::HeldoutLoss(std::vector<SegmentLoss>* segments) {
  torch::NoGradGuard no_grad;
  model_->eval();
  auto generator = at::detail::createCPUGenerator(options_.seed ^ 0x5eed);  // fixed batches
  const int64_t step = std::max<int64_t>(step_, 1);
  const int64_t seq_len = SeqLenAt(step);
  auto by_position = torch::zeros({seq_len}, torch::kDouble);
  for (int64_t b = 0; b < options_.eval_batches; ++b) {
    auto batch = Batch(heldout_, seq_len, BatchAt(step), generator);
    if (!batch.ok()) return std::nan("");  // LoadCorpus made sure the held-out text is long enough
    auto& [inputs, targets] = *batch;
    auto logits = model_->forward(inputs);
    auto losses = torch::nn::functional::cross_entropy(
        logits.flatten(0, 1), targets.flatten(),
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
    by_position += losses.view({inputs.size(0), seq_len}).to(torch::kDouble).mean(0);
  }
  model_->train();
  by_position /= static_cast<double>(options_.eval_batches);
  if (segments) {
    segments->clear();
    for (const auto& [begin, end] : PositionSegments(seq_len)) {
      segments->push_back(
          {begin, end, by_position.narrow(0, begin, end - begin).mean().item<double>()});
    }
  }
  return by_position.mean().item<double>();
}

absl::Status Trainer::Run(const std::function<void(const StepReport&)>& on_step) {
  model_->train();
  while (step_ < options_.steps) {
    const auto begin = std::chrono::steady_clock::now();
    StepReport report;
    auto loss = TrainStep();
    if (!loss.ok()) return loss.status();
    report.loss = *loss;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    report.step = step_;
    report.steps = options_.steps;
    report.lr = LearningRate(step_);
    report.seq_len = SeqLenAt(step_);
    report.batch = BatchAt(step_);
    report.tokens_per_second = report.batch * report.seq_len / std::max(seconds, 1e-9);
    const bool last = step_ == options_.steps;
    if (last || (options_.eval_every > 0 && step_ % options_.eval_every == 0)) {
      report.heldout_loss = HeldoutLoss(&report.heldout_segments);
    }
    if (!std::isfinite(report.loss)) {
      return absl::InternalError(absl::StrCat("training diverged at step ", step_, " (loss ",
                                              report.loss, "); lower --lr"));
    }
    if (on_step) on_step(report);
    const bool checkpoint_due =
        options_.checkpoint_every > 0 && step_ % options_.checkpoint_every == 0;
    if (!options_.checkpoint_dir.empty() && (checkpoint_due || last)) {
      if (auto status = SaveCheckpoint(); !status.ok()) return status;
    }
  }
  return absl::OkStatus();
}

absl::Status Trainer::SaveCheckpoint() {
  const std::string& dir = options_.checkpoint_dir;
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", error.message()));
  if (auto status = SavePackage(ModelPath(dir)); !status.ok()) return status;
  try {
    torch::save(*optimizer_, OptimizerPath(dir));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("cannot write optimizer state to ", dir));
  }
  std::ofstream(StepPath(dir)) << step_ << "\n";
  return absl::OkStatus();
}

absl::Status Trainer::SavePackage(const std::string& path) {
  return attn::SavePackage(path, model_, tokenizer_->Serialized());
}

}  // namespace attn
