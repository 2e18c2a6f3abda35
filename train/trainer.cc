#include "train/trainer.h"

#include <torch/torch.h>

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
  return o.model.Validate();
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
  auto tokenizer = Tokenizer::FromSerialized(package->tokenizer_model);
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
  if (heldout < options_.seq_len + 1 || total - heldout < options_.seq_len + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the corpus has ", total, " tokens: too few for seq_len ", options_.seq_len,
        " with a held-out share of ", options_.heldout_fraction, "; add text or shorten seq_len"));
  }
  auto all = torch::tensor(ids, torch::kLong);
  train_ = all.narrow(0, 0, total - heldout).clone();
  heldout_ = all.narrow(0, total - heldout, heldout).clone();
  return absl::OkStatus();
}

std::pair<torch::Tensor, torch::Tensor> Trainer::Batch(const torch::Tensor& tokens, int64_t batch,
                                                       torch::Generator& generator) const {
  const int64_t span = options_.seq_len + 1;
  auto starts = torch::randint(tokens.numel() - span + 1, {batch}, generator, torch::kLong);
  auto offsets = torch::arange(span, torch::kLong);
  auto windows = tokens.index({starts.unsqueeze(1) + offsets.unsqueeze(0)});  // [B, span]
  return {windows.narrow(1, 0, options_.seq_len), windows.narrow(1, 1, options_.seq_len)};
}

double Trainer::LearningRate(int64_t step) const {
  if (step <= options_.warmup) return options_.lr * step / std::max<int64_t>(options_.warmup, 1);
  const double progress = static_cast<double>(step - options_.warmup) /
                          std::max<int64_t>(options_.steps - options_.warmup, 1);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * std::min(progress, 1.0)));
  return options_.lr * (options_.min_lr_ratio + (1.0 - options_.min_lr_ratio) * cosine);
}

double Trainer::TrainStep() {
  const int64_t step = step_ + 1;
  auto generator = at::detail::createCPUGenerator(options_.seed * 1000003 + step);
  auto [inputs, targets] = Batch(train_, options_.batch, generator);
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

double Trainer::HeldoutLoss() {
  torch::NoGradGuard no_grad;
  model_->eval();
  auto generator = at::detail::createCPUGenerator(options_.seed ^ 0x5eed);  // fixed batches
  double total = 0.0;
  for (int64_t b = 0; b < options_.eval_batches; ++b) {
    auto [inputs, targets] = Batch(heldout_, options_.batch, generator);
    auto logits = model_->forward(inputs);
    total += torch::nn::functional::cross_entropy(logits.flatten(0, 1), targets.flatten())
                 .item<double>();
  }
  model_->train();
  return total / options_.eval_batches;
}

absl::Status Trainer::Run(const std::function<void(const StepReport&)>& on_step) {
  model_->train();
  while (step_ < options_.steps) {
    const auto begin = std::chrono::steady_clock::now();
    StepReport report;
    report.loss = TrainStep();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    report.step = step_;
    report.steps = options_.steps;
    report.lr = LearningRate(step_);
    report.tokens_per_second = options_.batch * options_.seq_len / std::max(seconds, 1e-9);
    const bool last = step_ == options_.steps;
    if (last || (options_.eval_every > 0 && step_ % options_.eval_every == 0)) {
      report.heldout_loss = HeldoutLoss();
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
