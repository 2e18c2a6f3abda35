// attn-train: text files in, a model package out.
//
//   attn-train --corpus=a.txt,b.txt --output=model.pt --mixer=aft-conv
//       --d_model=256 --layers=4 --steps=2000 --checkpoint_dir=ckpt
//   attn-train --corpus=... --output=model.pt --checkpoint_dir=ckpt --resume
//   attn-train --corpus=... --mixer=aft-decay --steps=1500
//       --curriculum=256:900,1024:1200,2048:1500
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "model/mixers/mixer.h"
#include "train/trainer.h"
#include "util/cpus.h"
#include "util/flags.h"

namespace {

// Every default comes from the options the trainer and the model are built
// with, and the list of mixers from AllMixerKinds().
const attn::TrainOptions& TrainDefaults() {
  static const auto* defaults = new attn::TrainOptions();
  return *defaults;
}
const attn::LmConfig& ModelDefaults() { return TrainDefaults().model; }

std::string MixerChoices() {
  std::vector<std::string> names;
  for (attn::MixerKind kind : attn::AllMixerKinds()) names.push_back(attn::MixerKindName(kind));
  return absl::StrCat("the sequence mixer: ", absl::StrJoin(names, ", "));
}

}  // namespace

ABSL_FLAG(std::string, corpus, "", "comma-separated plain-text files to train on");
ABSL_FLAG(std::string, output, "model.pt", "where to write the model package");
ABSL_FLAG(std::string, mixer, attn::MixerKindName(ModelDefaults().mixer), MixerChoices());
ABSL_FLAG(std::string, norm, attn::NormKindName(ModelDefaults().norm),
          "layernorm, scalenorm or rmsnorm");
ABSL_FLAG(std::string, positions, attn::PositionKindName(ModelDefaults().positions),
          "none, sinusoidal or learned");
ABSL_FLAG(int64_t, d_model, ModelDefaults().d_model, "model width");
ABSL_FLAG(int64_t, layers, ModelDefaults().layers, "number of layers");
ABSL_FLAG(int64_t, heads, ModelDefaults().heads, "attention heads (AFT-conv: bias heads)");
ABSL_FLAG(int64_t, ff_hidden, ModelDefaults().ff_hidden, "feed-forward hidden width");
ABSL_FLAG(int64_t, window, ModelDefaults().window, "AFT-local / AFT-conv / AFT-decay window");
ABSL_FLAG(int64_t, max_context, ModelDefaults().max_context, "longest sequence for bounded mixers");
ABSL_FLAG(int64_t, chunk, ModelDefaults().chunk,
          "tokens per block of the parallel forms (0: the mixer's fastest, see DefaultChunk)");
ABSL_FLAG(int64_t, vocab_size, ModelDefaults().vocab_size, "SentencePiece vocabulary size");
ABSL_FLAG(int64_t, seq_len, TrainDefaults().seq_len, "training sequence length");
ABSL_FLAG(int64_t, batch, TrainDefaults().batch,
          "sequences per step at --seq_len; curriculum stages keep batch * seq_len tokens");
ABSL_FLAG(std::string, curriculum, "",
          "sequence-length curriculum LEN:UNTIL_STEP,... (e.g. 256:900,1024:1200,2048:1500); "
          "empty: --seq_len throughout");
ABSL_FLAG(int64_t, steps, TrainDefaults().steps, "optimizer steps");
ABSL_FLAG(double, lr, TrainDefaults().lr, "peak learning rate");
ABSL_FLAG(double, min_lr_ratio, TrainDefaults().min_lr_ratio,
          "final learning rate as a fraction of --lr (cosine)");
ABSL_FLAG(int64_t, warmup, TrainDefaults().warmup, "linear warm-up steps");
ABSL_FLAG(double, weight_decay, TrainDefaults().weight_decay, "AdamW weight decay");
ABSL_FLAG(uint64_t, seed, TrainDefaults().seed,
          "seed: the same seed and threads give the same model");
ABSL_FLAG(int, threads, 0,
          "intra-op threads (0: the CPUs this process may use, cgroup quota included)");
ABSL_FLAG(int64_t, eval_every, TrainDefaults().eval_every, "steps between held-out evaluations");
ABSL_FLAG(std::string, checkpoint_dir, TrainDefaults().checkpoint_dir,
          "directory for checkpoints (empty: none)");
ABSL_FLAG(int64_t, checkpoint_every, TrainDefaults().checkpoint_every,
          "steps between checkpoints (0: only at the end)");
ABSL_FLAG(bool, resume, false, "continue from --checkpoint_dir");
ABSL_FLAG(bool, print_config, false,
          "print the model config these flags describe (the JSON a package stores) and exit; "
          "nothing is read or trained");

namespace {

std::string Duration(double seconds) {
  const auto s = static_cast<int64_t>(seconds);
  char buffer[32];
  if (s >= 3600) {
    std::snprintf(buffer, sizeof(buffer), "%ldh%02ldm", s / 3600, (s / 60) % 60);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%ldm%02lds", s / 60, s % 60);
  }
  return buffer;
}

// One progress line, redrawn in place on a terminal.
void ShowProgress(const attn::StepReport& r, double smoothed_tps, int64_t tokens_per_step) {
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(kWidth * r.step / r.steps);
  std::string bar(filled, '#');
  bar.resize(kWidth, '.');
  const double eta = smoothed_tps > 0 ? (r.steps - r.step) * tokens_per_step / smoothed_tps : 0;
  std::fprintf(stderr, "%s[%s] step %ld/%ld  len %ld  loss %.3f  %.0f tok/s  lr %.2e  eta %s",
               isatty(2) ? "\r" : "", bar.c_str(), r.step, r.steps, r.seq_len, r.loss, smoothed_tps,
               r.lr, Duration(eta).c_str());
  if (!isatty(2)) std::fprintf(stderr, "\n");
  if (r.heldout_loss) {
    std::fprintf(stderr, "%sstep %ld: held-out loss %.4f, perplexity %.2f (sequences of %ld)\n",
                 isatty(2) ? "\n" : "", r.step, *r.heldout_loss, std::exp(*r.heldout_loss),
                 r.seq_len);
    std::string segments = "  loss by position:";
    for (const auto& s : r.heldout_segments) {
      absl::StrAppendFormat(&segments, "  %ld-%ld %.3f", s.begin, s.end, s.loss);
    }
    std::fprintf(stderr, "%s\n", segments.c_str());
  }
}

// "256:900,1024:1500" -> stages; false (with a message) on a malformed list.
bool ParseCurriculum(const std::string& text, std::vector<attn::LengthStage>* stages) {
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> parts = absl::StrSplit(item, ':');
    attn::LengthStage stage;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &stage.seq_len) ||
        !absl::SimpleAtoi(parts[1], &stage.until)) {
      std::cerr << "--curriculum: expected LEN:UNTIL_STEP, got \"" << item << "\"\n";
      return false;
    }
    stages->push_back(stage);
  }
  return true;
}

bool ParseConfig(attn::LmConfig* config) {
  if (!attn::ParseMixerKind(absl::GetFlag(FLAGS_mixer), &config->mixer)) {
    std::cerr << "unknown --mixer " << absl::GetFlag(FLAGS_mixer) << "\n";
    return false;
  }
  if (!attn::ParseNormKind(absl::GetFlag(FLAGS_norm), &config->norm)) {
    std::cerr << "unknown --norm " << absl::GetFlag(FLAGS_norm) << "\n";
    return false;
  }
  if (!attn::ParsePositionKind(absl::GetFlag(FLAGS_positions), &config->positions)) {
    std::cerr << "unknown --positions " << absl::GetFlag(FLAGS_positions) << "\n";
    return false;
  }
  config->d_model = absl::GetFlag(FLAGS_d_model);
  config->layers = absl::GetFlag(FLAGS_layers);
  config->heads = absl::GetFlag(FLAGS_heads);
  config->ff_hidden = absl::GetFlag(FLAGS_ff_hidden);
  config->window = absl::GetFlag(FLAGS_window);
  config->max_context = absl::GetFlag(FLAGS_max_context);
  config->chunk = absl::GetFlag(FLAGS_chunk);
  config->vocab_size = absl::GetFlag(FLAGS_vocab_size);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Trains a language model on text files and writes a model package.");
  attn::ListFlagsOfFolderInHelp(__FILE__);
  absl::ParseCommandLine(argc, argv);
  attn::ConfigureThreads(absl::GetFlag(FLAGS_threads));

  attn::TrainOptions options;
  for (auto file : absl::StrSplit(absl::GetFlag(FLAGS_corpus), ',', absl::SkipEmpty())) {
    options.corpus_files.emplace_back(file);
  }
  if (!ParseConfig(&options.model)) return 2;
  if (absl::GetFlag(FLAGS_print_config)) {
    if (absl::Status valid = options.model.Validate(); !valid.ok()) {
      std::cerr << "attn-train: " << valid.message() << "\n";
      return 2;
    }
    std::cout << options.model.ToJson() << "\n";
    return 0;
  }
  options.seq_len = absl::GetFlag(FLAGS_seq_len);
  options.batch = absl::GetFlag(FLAGS_batch);
  if (!ParseCurriculum(absl::GetFlag(FLAGS_curriculum), &options.length_stages)) return 2;
  options.steps = absl::GetFlag(FLAGS_steps);
  options.lr = absl::GetFlag(FLAGS_lr);
  options.min_lr_ratio = absl::GetFlag(FLAGS_min_lr_ratio);
  options.warmup = absl::GetFlag(FLAGS_warmup);
  options.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.eval_every = absl::GetFlag(FLAGS_eval_every);
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);

  std::cerr << (absl::GetFlag(FLAGS_resume) ? "resuming from " + options.checkpoint_dir
                                            : std::string("training the tokenizer and reading "
                                                          "the corpus"))
            << "...\n";
  auto trainer =
      absl::GetFlag(FLAGS_resume) ? attn::Trainer::Resume(options) : attn::Trainer::Create(options);
  if (!trainer.ok()) {
    std::cerr << "attn-train: " << trainer.status().message() << "\n";
    return 1;
  }
  auto& t = **trainer;
  std::cerr << "model: " << t.model()->parameter_count() << " parameters, "
            << attn::MixerKindName(t.model()->config().mixer) << "; corpus: " << t.train_tokens()
            << " training and " << t.heldout_tokens() << " held-out tokens; starting at step "
            << t.step() << "\n";
  double smoothed = 0.0;
  const auto status = t.Run([&](const attn::StepReport& r) {
    smoothed = smoothed == 0.0 ? r.tokens_per_second : 0.9 * smoothed + 0.1 * r.tokens_per_second;
    ShowProgress(r, smoothed, r.batch * r.seq_len);
  });
  if (isatty(2)) std::cerr << "\n";
  if (!status.ok()) {
    std::cerr << "attn-train: " << status.message() << "\n";
    return 1;
  }
  if (auto saved = t.SavePackage(absl::GetFlag(FLAGS_output)); !saved.ok()) {
    std::cerr << "attn-train: " << saved.message() << "\n";
    return 1;
  }
  std::cerr << "wrote " << absl::GetFlag(FLAGS_output) << "\n";
  return 0;
}
