#include "model/lm/generation.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "tests/test_util.h"
#include "tests/tiny_model.h"

namespace attn {
namespace {

class GenerationTest : public ::testing::TestWithParam<MixerKind> {
 protected:
  static void SetUpTestSuite() {
    testing::ScopedTempDir dir("generation_test");
    testing::WriteSyntheticCorpus(
        dir.File("corpus.txt"),
        {"a", "quiet", "river", "keeps", "its", "small", "state", "light", "falls", "over", "stone",
         "and", "water", "night", "finds", "the", "garden"});
    TokenizerTrainOptions options;
    options.input_files = {dir.File("corpus.txt")};
    options.vocab_size = 300;
    auto trained = Tokenizer::Train(options);
    ASSERT_TRUE(trained.ok()) << trained.status();
    tokenizer_ = new Tokenizer(std::move(*trained));
  }
  static void TearDownTestSuite() { delete tokenizer_; }

  CausalLm Model() const {
    const LmConfig c = testing::SmallLmConfig(GetParam(), tokenizer_->vocab_size());
    torch::manual_seed(91);
    CausalLm model(c);
    testing::RandomizePositionParameters(*model, 0.3);
    model->eval();
    return model;
  }

  static Tokenizer* tokenizer_;
};

Tokenizer* GenerationTest::tokenizer_ = nullptr;

// Greedy generation through prefill and step equals re-running the parallel
// form on the whole sequence for every token, and reports its logprobs.
TEST_P(GenerationTest, GreedyEqualsRecomputingTheParallelForm) {
  auto model = Model();
  const auto prompt = tokenizer_->Encode("a quiet river keeps");
  GenerationOptions options;
  options.max_tokens = 20;
  options.prefill_chunk = 3;  // several chunks
  options.stop_at_eos = false;
  options.sampling.temperature = 0.0;
  std::vector<double> logprobs;
  auto result = Generate(model, *tokenizer_, prompt, options,
                         [&](const GeneratedPiece& p) { logprobs.push_back(p.token.logprob); });
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->tokens.size(), 20u);

  torch::NoGradGuard no_grad;
  std::vector<int64_t> sequence = prompt;
  for (size_t n = 0; n < 20; ++n) {
    auto logits =
        model->forward(torch::tensor(sequence, torch::kLong).unsqueeze(0))[0].select(0, -1);
    const int64_t expected = logits.argmax().item<int64_t>();
    ASSERT_EQ(result->tokens[n], expected) << "token " << n;
    EXPECT_NEAR(logprobs[n], torch::log_softmax(logits, 0)[expected].item<double>(), 1e-4);
    sequence.push_back(expected);
  }
  // The streamed text continues the prompt's text exactly.
  std::vector<int64_t> whole = prompt;
  whole.insert(whole.end(), result->tokens.begin(), result->tokens.end());
  EXPECT_EQ(tokenizer_->Decode(prompt) + result->text, tokenizer_->Decode(whole));
}

TEST_P(GenerationTest, BadRequestsAreRefused) {
  auto model = Model();
  GenerationOptions options;
  EXPECT_EQ(Generate(model, *tokenizer_, {}, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Generate(model, *tokenizer_, {1, 99999}, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.sampling.top_p = 0;
  EXPECT_EQ(Generate(model, *tokenizer_, {5}, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  if (model->max_context() > 0) {
    GenerationOptions too_long;
    too_long.max_tokens = model->max_context();
    auto status = Generate(model, *tokenizer_, {5, 6}, too_long).status();
    EXPECT_NE(std::string(status.message()).find("exceeds the model's context"), std::string::npos)
        << status;
  }
}

INSTANTIATE_TEST_SUITE_P(Mixers, GenerationTest,
                         ::testing::Values(MixerKind::kAftConv, MixerKind::kLinearExp,
                                           MixerKind::kMhaAlibi, MixerKind::kAftFull),
                         testing::KindTestName<::testing::TestParamInfo<MixerKind>>);

}  // namespace
}  // namespace attn
