#include "model/text/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "tests/test_corpus.h"
#include "util/utf8.h"

namespace attn {
namespace {

namespace fs = std::filesystem;

// A small synthetic corpus: English-like sentences with punctuation, digits
// and a few accented words.
std::string WriteCorpus(const fs::path& dir) {
  static const char* kWords[] = {"the",   "stream",  "keeps", "a",     "small", "state",
                                 "token", "model",   "river", "flows", "over",  "stones",
                                 "and",   "light",   "falls", "on",    "water", "café",
                                 "naïve", "through", "every", "night", "quiet", "garden"};
  std::mt19937 rng(5);
  const fs::path path = dir / "corpus.txt";
  std::ofstream out(path);
  for (int line = 0; line < 3000; ++line) {
    const int words = 4 + static_cast<int>(rng() % 10);
    for (int w = 0; w < words; ++w) {
      out << (w ? " " : "") << kWords[rng() % (sizeof(kWords) / sizeof(*kWords))];
    }
    out << (line % 7 == 0 ? ", " + std::to_string(rng() % 1000) : "") << ".\n";
  }
  return path.string();
}

class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::ScopedTempDir("tokenizer_test");
    TokenizerTrainOptions options;
    options.input_files = {WriteCorpus(dir_->path())};
    options.vocab_size = 300;  // byte fallback alone takes 256 + 3 specials
    auto trained = Tokenizer::Train(options);
    ASSERT_TRUE(trained.ok()) << trained.status();
    tokenizer_ = new Tokenizer(std::move(*trained));
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete dir_;
  }

  static testing::ScopedTempDir* dir_;
  static Tokenizer* tokenizer_;
};

testing::ScopedTempDir* TokenizerTest::dir_ = nullptr;
Tokenizer* TokenizerTest::tokenizer_ = nullptr;

const std::vector<std::string>& Texts() {
  static const auto* texts = new std::vector<std::string>{
      "the stream keeps a small state.",
      "  two leading spaces,  double  spaces and a trailing one ",
      "tabs\tand\nnew\nlines\n",
      "emoji \xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd and CJK \xe6\xbc\xa2\xe5\xad\x97",
      "caf\xc3\xa9 na\xc3\xafve \xc3\x9f\xe2\x82\xac 12345 #$%&*@",
      "UPPER lower MiXeD",
      "",
  };
  return *texts;
}

TEST_F(TokenizerTest, ArbitraryUtf8RoundTrips) {
  EXPECT_EQ(tokenizer_->vocab_size(), 300);
  for (const auto& text : Texts()) {
    EXPECT_EQ(tokenizer_->Decode(tokenizer_->Encode(text)), text) << text;
  }
}

TEST_F(TokenizerTest, InvalidBytesAreHandledNotFatal) {
  const std::string text = "ok \xff\xfe bytes \xc3";
  const auto decoded = tokenizer_->Decode(tokenizer_->Encode(text));
  std::string valid;
  EXPECT_EQ(TakeCompleteUtf8(decoded, &valid), decoded.size());
  EXPECT_EQ(valid, decoded) << "decoded text must be valid UTF-8";
  EXPECT_NE(decoded.find("bytes"), std::string::npos);
}

TEST_F(TokenizerTest, IncrementalDecodingConcatenatesToTheFullText) {
  for (const auto& text : Texts()) {
    const auto ids = tokenizer_->Encode(text);
    IncrementalDecoder decoder(*tokenizer_);
    std::string streamed;
    for (int64_t id : ids) {
      const std::string piece = decoder.Push(id);
      std::string check;
      EXPECT_EQ(TakeCompleteUtf8(piece, &check), piece.size()) << "half a character emitted";
      EXPECT_EQ(check, piece);
      streamed += piece;
    }
    streamed += decoder.Finish();
    EXPECT_EQ(streamed, tokenizer_->Decode(ids)) << text;
    EXPECT_EQ(streamed, text);
  }
}

TEST_F(TokenizerTest, AByteFallbackCharacterComesOutWhole) {
  const std::string emoji = "\xf0\x9f\x98\x80";  // not in a 300-piece vocabulary
  const auto ids = tokenizer_->Encode(emoji);
  ASSERT_GE(ids.size(), 4u) << "expected byte tokens";
  IncrementalDecoder decoder(*tokenizer_);
  std::vector<std::string> pieces;
  for (int64_t id : ids) pieces.push_back(decoder.Push(id));
  for (size_t i = 0; i + 1 < pieces.size(); ++i) EXPECT_EQ(pieces[i], "") << i;
  EXPECT_EQ(pieces.back(), emoji);
}

TEST_F(TokenizerTest, UnfinishedCharacterAtTheEndBecomesReplacement) {
  const auto ids = tokenizer_->Encode("\xf0\x9f\x98\x80");
  IncrementalDecoder decoder(*tokenizer_);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(decoder.Push(ids[0]), "");  // the word mark a text starts with
  EXPECT_EQ(decoder.Push(ids[1]), "");  // the first byte of four
  EXPECT_EQ(decoder.Push(ids[2]), "");
  EXPECT_EQ(decoder.Finish(), "\xef\xbf\xbd");
}

TEST_F(TokenizerTest, AContinuationKeepsTheSpaceBeforeItsFirstWord) {
  const auto prompt = tokenizer_->Encode("the stream");
  const auto more = tokenizer_->Encode("the stream keeps a state");
  ASSERT_GT(more.size(), prompt.size());
  IncrementalDecoder decoder(*tokenizer_, /*continues_text=*/true);
  std::string streamed;
  for (size_t i = prompt.size(); i < more.size(); ++i) streamed += decoder.Push(more[i]);
  EXPECT_EQ(tokenizer_->Decode(prompt) + streamed + decoder.Finish(), tokenizer_->Decode(more));
}

TEST_F(TokenizerTest, SerializedModelReloads) {
  auto reloaded = Tokenizer::FromSerialized(tokenizer_->Serialized());
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_EQ(reloaded->Encode(Texts()[0]), tokenizer_->Encode(Texts()[0]));
  EXPECT_EQ(tokenizer_->eos_id(), 2);
}

TEST(TokenizerErrors, AreStatusesNotCrashes) {
  EXPECT_EQ(Tokenizer::FromSerialized("not a model").status().code(),
            absl::StatusCode::kInvalidArgument);
  TokenizerTrainOptions options;
  options.input_files = {"/nonexistent/corpus.txt"};
  auto trained = Tokenizer::Train(options);
  EXPECT_EQ(trained.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(trained.status().message()).find("/nonexistent/corpus.txt"),
            std::string::npos);
}

// Tokenizer "bytes" of docs/model-contract.md: UTF-8 bytes are the ids.
TEST(BytesTokenizer, EncodesBytesAndDecodesWholeCharacters) {
  auto bytes = Tokenizer::Bytes(257, 256);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(bytes->vocab_size(), 257);
  EXPECT_EQ(bytes->eos_id(), 256);
  EXPECT_EQ(bytes->Serialized(), "");
  const std::string text = " a\xc3\xa9!";  // " aé!", with its leading space
  const std::vector<int64_t> ids = bytes->Encode(text);
  EXPECT_EQ(ids, (std::vector<int64_t>{32, 97, 0xc3, 0xa9, 33}));
  EXPECT_EQ(bytes->Decode(ids), text);
  EXPECT_EQ(bytes->Decode({97, 0xc3}), "a\xef\xbf\xbd");  // a cut-off character: U+FFFD
  EXPECT_EQ(bytes->TokenBytes(256), "");
  IncrementalDecoder decoder(*bytes);
  std::string streamed;
  for (int64_t id : ids) {
    const std::string piece = decoder.Push(id);
    if (id == 0xc3) {
      EXPECT_EQ(piece, "") << "half a character";
    }
    streamed += piece;
  }
  EXPECT_EQ(streamed + decoder.Finish(), text);
}

TEST(BytesTokenizer, NeedsRoomForEveryByte) {
  EXPECT_EQ(Tokenizer::Bytes(200, -1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Tokenizer::Bytes(256, 256).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Tokenizer::Bytes(256, -1).ok());
}

}  // namespace
}  // namespace attn
