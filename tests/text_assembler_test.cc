#include "model/text/text_assembler.h"

#include <gtest/gtest.h>

#include "tests/tiny_tokenizer.h"

namespace attn {
namespace {

using attn::testing::TinyTokenizer;

// What the tokens decode to without stop strings.
std::string Decoded(const std::vector<int64_t>& ids) {
  IncrementalDecoder decoder(TinyTokenizer(), /*continues_text=*/true);
  std::string text;
  for (int64_t id : ids) text += decoder.Push(id);
  return text + decoder.Finish();
}

struct Assembled {
  std::string text;
  bool stopped = false;
  size_t tokens_pushed = 0;
};

Assembled Assemble(const std::vector<int64_t>& ids, const std::vector<std::string>& stop) {
  TextAssembler assembler(TinyTokenizer(), stop);
  Assembled run;
  for (int64_t id : ids) {
    run.text += assembler.Push(id);
    ++run.tokens_pushed;
    if (assembler.stopped()) break;
  }
  run.stopped = assembler.stopped();
  if (!run.stopped) run.text += assembler.Finish();
  return run;
}

const std::string kText = "the river keeps its small state and light falls over stone";

TEST(TextAssemblerTest, WithoutStopStringsEqualsTheDecodedText) {
  const auto ids = TinyTokenizer().Encode(kText);
  const Assembled run = Assemble(ids, {});
  EXPECT_FALSE(run.stopped);
  EXPECT_EQ(run.text, Decoded(ids));
}

TEST(TextAssemblerTest, StopsBeforeTheFirstStopStringAndNeverEmitsIt) {
  const auto ids = TinyTokenizer().Encode(kText);
  const std::string full = Decoded(ids);
  // "er kee" spans two words, so at least two tokens; "light" is later.
  for (const std::string& stop :
       {std::string("er kee"), std::string("small"), std::string("s sm")}) {
    SCOPED_TRACE(stop);
    const Assembled run = Assemble(ids, {"light", stop});
    EXPECT_TRUE(run.stopped);
    EXPECT_EQ(run.text, full.substr(0, full.find(stop)));
  }
}

TEST(TextAssemblerTest, HeldTextIsReleasedWhenTheStopStringDoesNotComplete) {
  const auto ids = TinyTokenizer().Encode(kText);
  // "stone!" starts like "stone" at the end but never completes.
  const Assembled run = Assemble(ids, {"stone!"});
  EXPECT_FALSE(run.stopped);
  EXPECT_EQ(run.text, Decoded(ids));
}

TEST(TextAssemblerTest, EmittedTextIsAlwaysAPrefixOfTheResult) {
  const auto ids = TinyTokenizer().Encode(kText);
  const std::string full = Decoded(ids);
  TextAssembler assembler(TinyTokenizer(), {"falls over"});
  std::string so_far;
  for (int64_t id : ids) {
    so_far += assembler.Push(id);
    EXPECT_EQ(full.compare(0, so_far.size(), so_far), 0);
    EXPECT_EQ(so_far.find("falls"), std::string::npos) << "held text leaked: " << so_far;
    if (assembler.stopped()) break;
  }
  EXPECT_TRUE(assembler.stopped());
}

}  // namespace
}  // namespace attn
