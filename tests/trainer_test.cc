#include "train/trainer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/test_util.h"

namespace attn {
namespace {

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A predictable corpus: counting in words, so a small model can learn it.
    static const char* kNumbers[] = {"one", "two",   "three", "four", "five",
                                     "six", "seven", "eight", "nine", "ten"};
    std::ofstream out(dir_.File("corpus.txt"));
    for (int line = 0; line < 1500; ++line) {
      const int start = line % 5;
      for (int i = start; i < start + 6; ++i)
        out << kNumbers[i] << (i + 1 < start + 6 ? " " : ".\n");
    }
  }

  TrainOptions Options() const {
    TrainOptions o;
    o.corpus_files = {dir_.File("corpus.txt")};
    o.model.vocab_size = 280;  // the byte pieces plus a few words: all this text supports
    o.model.d_model = 32;
    o.model.layers = 2;
    o.model.heads = 4;
    o.model.ff_hidden = 64;
    o.model.mixer = MixerKind::kAftConv;
    o.model.window = 8;
    o.seq_len = 32;
    o.batch = 8;
    o.steps = 150;
    o.lr = 1e-2;
    o.warmup = 10;
    o.eval_every = 0;
    o.eval_batches = 4;
    o.seed = 3;
    return o;
  }

  // Losses of steps start+1 .. end of a run of `trainer`.
  static std::vector<double> Losses(Trainer& trainer) {
    std::vector<double> losses;
    EXPECT_TRUE(trainer.Run([&](const StepReport& r) { losses.push_back(r.loss); }).ok());
    return losses;
  }

  testing::ScopedTempDir dir_{"trainer_test"};
};

TEST_F(TrainerTest, LearnsTheCorpus) {
  auto trainer = Trainer::Create(Options());
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  const double before = (*trainer)->HeldoutLoss();
  std::vector<double> heldout;
  ASSERT_TRUE((*trainer)
                  ->Run([&](const StepReport& r) {
                    if (r.heldout_loss) heldout.push_back(*r.heldout_loss);
                  })
                  .ok());
  ASSERT_EQ(heldout.size(), 1u);  // evaluated at the last step
  // Uniform over 280 tokens is ln 280 = 5.6 nats; counting text is nearly
  // deterministic once learned.
  EXPECT_GT(before, 4.0);
  EXPECT_LT(heldout[0], 1.0) << "held-out loss before training: " << before;
}

TEST_F(TrainerTest, SameSeedGivesTheSameLosses) {
  auto options = Options();
  options.steps = 5;
  auto a = Trainer::Create(options);
  auto b = Trainer::Create(options);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(Losses(**a), Losses(**b));
}

TEST_F(TrainerTest, ResumeContinuesWithIdenticalLosses) {
  auto options = Options();
  options.steps = 10;
  options.warmup = 0;
  options.min_lr_ratio = 1.0;  // a constant rate: the schedule is the same for 5 and 10 steps
  auto whole = Trainer::Create(options);
  ASSERT_TRUE(whole.ok());
  const auto expected = Losses(**whole);

  auto first_half = options;
  first_half.steps = 5;
  first_half.checkpoint_dir = dir_.File("ckpt");
  auto part = Trainer::Create(first_half);
  ASSERT_TRUE(part.ok());
  Losses(**part);  // checkpoints at its last step, 5
  auto resumed_options = options;
  resumed_options.checkpoint_dir = first_half.checkpoint_dir;
  auto resumed = Trainer::Resume(resumed_options);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ((*resumed)->step(), 5);
  const auto rest = Losses(**resumed);
  ASSERT_EQ(rest.size(), 5u);
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i], expected[5 + i]) << "step " << 6 + i;
}

TEST_F(TrainerTest, ScheduleWarmsUpThenDecays) {
  auto trainer = Trainer::Create(Options());
  ASSERT_TRUE(trainer.ok());
  const auto& t = **trainer;
  EXPECT_NEAR(t.LearningRate(5), 1e-2 * 5 / 10, 1e-12);
  EXPECT_NEAR(t.LearningRate(10), 1e-2, 1e-12);
  EXPECT_NEAR(t.LearningRate(150), 1e-3, 1e-12);  // min_lr_ratio 0.1
  EXPECT_GT(t.LearningRate(60), t.LearningRate(100));
}

// Stages 32 then 160 tokens: each step reports its stage's length, the
// batch shrinks to keep about 256 tokens per step, and the last held-out
// evaluation runs at 160 tokens and reports loss by position segment.
TEST_F(TrainerTest, CurriculumLengthensSequencesAtAboutEqualTokensPerStep) {
  auto options = Options();
  options.steps = 6;
  options.length_stages = {{32, 3}, {160, 6}};
  auto trainer = Trainer::Create(options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  std::vector<StepReport> reports;
  ASSERT_TRUE((*trainer)->Run([&](const StepReport& r) { reports.push_back(r); }).ok());
  ASSERT_EQ(reports.size(), 6u);
  for (const auto& r : reports) {
    EXPECT_EQ(r.seq_len, r.step <= 3 ? 32 : 160) << "step " << r.step;
    EXPECT_EQ(r.batch, r.step <= 3 ? 8 : 1) << "step " << r.step;
  }
  const auto& last = reports.back();
  ASSERT_TRUE(last.heldout_loss.has_value());
  ASSERT_EQ(last.heldout_segments.size(), 2u);
  EXPECT_EQ(last.heldout_segments[0].begin, 0);
  EXPECT_EQ(last.heldout_segments[0].end, 128);
  EXPECT_EQ(last.heldout_segments[1].end, 160);
  const double mean =
      (128 * last.heldout_segments[0].loss + 32 * last.heldout_segments[1].loss) / 160;
  EXPECT_NEAR(mean, *last.heldout_loss, 1e-6);
}

// Forty short files: their tokens together make long sequences, but no one
// document does, and a training sequence never spans two documents.
TEST_F(TrainerTest, SequencesNeverCrossDocuments) {
  auto options = Options();
  options.corpus_files.clear();
  for (int f = 0; f < 40; ++f) {
    const std::string path = dir_.File("doc" + std::to_string(f) + ".txt");
    std::ofstream(path) << "one two three four five six seven eight nine ten.\n";
    options.corpus_files.push_back(path);
  }
  options.heldout_fraction = 0.2;
  options.seq_len = 64;
  auto trainer = Trainer::Create(options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  const auto status = (*trainer)->Run(nullptr);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(std::string(status.message()).find("no document of the corpus holds 65 tokens"),
            std::string::npos)
      << status;
}

TEST_F(TrainerTest, TooSmallACorpusIsAClearError) {
  auto options = Options();
  options.seq_len = 100000;
  auto trainer = Trainer::Create(options);
  ASSERT_FALSE(trainer.ok());
  EXPECT_NE(std::string(trainer.status().message()).find("too few for seq_len 100000"),
            std::string::npos)
      << trainer.status();
}

}  // namespace
}  // namespace attn

namespace attn {
namespace {

TEST(PositionSegmentsTest, DoubleFrom128AndStopAtTheLength) {
  using Segments = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(PositionSegments(100), (Segments{{0, 100}}));
  EXPECT_EQ(PositionSegments(128), (Segments{{0, 128}}));
  EXPECT_EQ(PositionSegments(600), (Segments{{0, 128}, {128, 256}, {256, 512}, {512, 600}}));
}

}  // namespace
}  // namespace attn
