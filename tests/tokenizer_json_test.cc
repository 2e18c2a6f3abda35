// tokenizer.json behaviour that the real files of tests/data/tokenizers do
// not reach (tests/text/tokenizer_json_agrees.sh compares those with
// tokenizers.js): Metaspace's split, vocabularies without some bytes,
// unknown tokens, added tokens' lstrip and rstrip, the post-processor's
// template, ids a padded embedding has beyond the tokenizer, and the
// Unicode forms and properties none of the real files uses.
#include "model/text/tokenizer_json.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/lm/continuation.h"
#include "model/text/tokenizer.h"
#include "nlohmann/json.hpp"

namespace attn {
namespace {

using Json = nlohmann::json;
using Ids = std::vector<int64_t>;

// U+2581, the mark SentencePiece-style vocabularies put for a space.
const std::string kMark = "\xe2\x96\x81";

Json MetaspaceTokenizer(bool split) {
  Json t;
  t["model"] = {
      {"type", "BPE"},
      {"vocab",
       {{kMark, 0}, {"a", 1}, {"b", 2}, {kMark + kMark, 3}, {kMark + "a", 4}, {kMark + "b", 5}}},
      {"merges", {kMark + " " + kMark, kMark + " a", kMark + " b"}}};
  t["pre_tokenizer"] = {{"type", "Metaspace"},
                        {"replacement", kMark},
                        {"prepend_scheme", "always"},
                        {"split", split}};
  t["decoder"] = {{"type", "Metaspace"}, {"replacement", kMark}, {"prepend_scheme", "always"}};
  return t;
}

TEST(TokenizerJson, MetaspaceSplitStartsAWordAtEachMark) {
  // "▁a▁▁b": split, the words are ▁a, ▁ and ▁b (each mark merged with what
  // follows it); whole, the higher-ranked ▁▁ merge wins first.
  auto split = Tokenizer::FromTokenizerJson(MetaspaceTokenizer(true).dump());
  auto whole = Tokenizer::FromTokenizerJson(MetaspaceTokenizer(false).dump());
  ASSERT_TRUE(split.ok()) << split.status();
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(split->Encode("a  b"), (Ids{4, 0, 5}));
  EXPECT_EQ(whole->Encode("a  b"), (Ids{4, 3, 2}));
  // The decoder turns marks into spaces and drops the one it prepended.
  EXPECT_EQ(split->Decode({4, 0, 5}), "a  b");
  EXPECT_TRUE(split->drops_leading_space());
}

Json ByteLevelTokenizer() {
  // GPT-2's characters for the bytes of "é" (0xC3 0xA9) are Ã and ©; this
  // vocabulary has © but no Ã, as real ones lack 0xC0, 0xC1 and 0xF5-0xFF.
  Json t;
  t["model"] = {{"type", "BPE"},
                {"vocab", {{"a", 0}, {"\xc2\xa9", 1}, {"\xc4\xa0", 2}, {"<|endoftext|>", 3}}},
                {"merges", Json::array()}};
  t["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
  t["decoder"] = {{"type", "ByteLevel"}};
  t["added_tokens"] = {{{"id", 3},
                        {"content", "<|endoftext|>"},
                        {"special", true},
                        {"lstrip", true},
                        {"rstrip", true}}};
  t["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<|endoftext|>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
      {"special_tokens", {{"<|endoftext|>", {{"id", "<|endoftext|>"}, {"ids", {3}}}}}}};
  return t;
}

TEST(TokenizerJson, AByteWithoutATokenIsLeftOutNotRefused) {
  auto tokenizer = TokenizerJson::Parse(ByteLevelTokenizer().dump());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(tokenizer->Encode("a\xc3\xa9"), (Ids{0, 1}));
  EXPECT_EQ(tokenizer->TokenBytes(1), "\xa9");
}

TEST(TokenizerJson, AddedTokensTakeTheWhitespaceTheyStripAndTheTemplateAddsBos) {
  auto tokenizer = TokenizerJson::Parse(ByteLevelTokenizer().dump());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(tokenizer->Encode("a <|endoftext|> a"), (Ids{0, 3, 0}));
  EXPECT_EQ(tokenizer->Encode("a a"), (Ids{0, 2, 0}));
  EXPECT_EQ(tokenizer->Encode("a", /*add_special_tokens=*/true), (Ids{3, 0}));
  EXPECT_EQ(tokenizer->bos_id(), 3);
  EXPECT_EQ(tokenizer->eos_id(), 3);
  EXPECT_EQ(tokenizer->TokenBytes(3), "");  // special: decodes to nothing
}

TEST(TokenizerJson, UnknownCharactersBecomeTheUnknownTokenFusedWhenAsked) {
  Json t;
  t["model"] = {{"type", "BPE"},
                {"vocab", {{"<unk>", 0}, {"a", 1}}},
                {"merges", Json::array()},
                {"unk_token", "<unk>"},
                {"fuse_unk", true}};
  auto fused = TokenizerJson::Parse(t.dump());
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_EQ(fused->Encode("axyza"), (Ids{1, 0, 1}));
  t["model"]["fuse_unk"] = false;
  auto apart = TokenizerJson::Parse(t.dump());
  ASSERT_TRUE(apart.ok()) << apart.status();
  EXPECT_EQ(apart->Encode("axyza"), (Ids{1, 0, 0, 0, 1}));
}

TEST(TokenizerJson, RefusalsNameTheComponent) {
  Json t = ByteLevelTokenizer();
  t["model"]["merges"] = {"a zz"};
  auto merge = TokenizerJson::Parse(t.dump());
  EXPECT_EQ(merge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(merge.status().message().find("model.merges[0]"), std::string::npos) << merge.status();
  t = ByteLevelTokenizer();
  t["decoder"] = {{"type", "Sequence"},
                  {"decoders", {{{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  auto strip = TokenizerJson::Parse(t.dump());
  EXPECT_NE(strip.status().message().find("decoder.decoders[0]"), std::string::npos)
      << strip.status();
  // Fields of the wrong type are refused by name, never thrown (a Strip's
  // numbers as strings; prepend_scheme as a number, found by the fuzzer).
  t["decoder"]["decoders"][0]["start"] = "1";
  EXPECT_EQ(TokenizerJson::Parse(t.dump()).status().code(), absl::StatusCode::kInvalidArgument);
  for (const char* part : {"pre_tokenizer", "decoder"}) {
    Json metaspace = MetaspaceTokenizer(true);
    metaspace[part]["prepend_scheme"] = 7;
    auto scheme = TokenizerJson::Parse(metaspace.dump());
    EXPECT_NE(scheme.status().message().find(std::string(part) + ".prepend_scheme"),
              std::string::npos)
        << scheme.status();
  }
}

TEST(TokenizerJson, PackagesOfTheOlderKindNameLoad) {
  auto older = Tokenizer::FromStored("byte-level-bpe", ByteLevelTokenizer().dump());
  ASSERT_TRUE(older.ok()) << older.status();
  EXPECT_EQ(older->kind(), "tokenizer-json");
  EXPECT_TRUE(Tokenizer::IsKind("byte-level-bpe"));
  EXPECT_FALSE(Tokenizer::IsKind("wordpiece"));
}

TEST(TokenizerJson, PaddedIdsAreInputButNeverSampled) {
  auto tokenizer = Tokenizer::FromTokenizerJson(ByteLevelTokenizer().dump());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  tokenizer->PadTo(8);  // four ids past the tokenizer's four
  EXPECT_EQ(tokenizer->text_vocab_size(), 4);
  EXPECT_EQ(tokenizer->vocab_size(), 8);
  EXPECT_TRUE(tokenizer->IsValidId(7));
  EXPECT_FALSE(tokenizer->IsValidId(8));
  EXPECT_EQ(tokenizer->Decode({0, 6, 0}), "aa");
  ContinuationOptions options;
  options.max_tokens = 4;
  options.sampling.temperature = 0;
  Continuation continuation(*tokenizer, {0, 6}, options);
  const std::vector<float> logits = {0.f, 1.f, 2.f, 0.5f, 9.f, 9.f, 9.f, 9.f};
  const SampledToken token = continuation.Sample(logits.data(), 8);
  EXPECT_EQ(token.id, 2);
  // Its log-probability is the model's own, over all eight rows.
  EXPECT_NEAR(token.logprob, LogSoftmaxAt(logits.data(), 8, 2), 1e-6);
}

// One token per character, no merges: the ids Encode returns spell the text
// after the normalizer and the pre-tokenizer.
Json CharacterTokenizer(const Json& normalizer, const Json& pre_tokenizer) {
  Json t;
  t["model"] = {{"type", "BPE"},
                {"vocab",
                 {{"e", 0},
                  {"\xc3\xa9", 1},  // U+00E9, e with acute
                  {"\xcc\x81", 2},  // U+0301, the combining acute
                  {"f", 3},
                  {"i", 4},
                  {"\xef\xac\x81", 5},  // U+FB01, the fi ligature
                  {"E", 6},
                  {"\xf0\x9f\x98\x80", 7},  // U+1F600, an emoji
                  {"x", 8}}},
                {"merges", Json::array()}};
  t["normalizer"] = normalizer;
  t["pre_tokenizer"] = pre_tokenizer;
  return t;
}

Ids EncodeWith(const Json& normalizer, const Json& pre_tokenizer, const std::string& text) {
  auto tokenizer = TokenizerJson::Parse(CharacterTokenizer(normalizer, pre_tokenizer).dump());
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? tokenizer->Encode(text) : Ids{};
}

// ICU keeps NFC's tables and the character properties in its common
// library but NFKC's tables and the emoji properties in its data library;
// the GPU kit (scripts/gpu/make_kit.sh) carries a reduced data library and
// checks it with this test.
TEST(TokenizerJson, EveryNormalFormAndPropertyClassHasItsData) {
  const std::string e_acute = "\xc3\xa9", acute = "\xcc\x81", fi = "\xef\xac\x81";
  const std::string emoji = "\xf0\x9f\x98\x80";
  const Json none;
  auto form = [](const char* type) { return Json{{"type", type}}; };
  EXPECT_EQ(EncodeWith(form("NFC"), none, "e" + acute), (Ids{1}));
  EXPECT_EQ(EncodeWith(form("NFC"), none, fi), (Ids{5}));
  EXPECT_EQ(EncodeWith(form("NFD"), none, e_acute), (Ids{0, 2}));
  EXPECT_EQ(EncodeWith(form("NFKC"), none, fi + "e" + acute), (Ids{3, 4, 1}));
  EXPECT_EQ(EncodeWith(form("NFKD"), none, fi + e_acute), (Ids{3, 4, 0, 2}));
  EXPECT_EQ(EncodeWith(form("Lowercase"), none, "E" + e_acute), (Ids{0, 1}));
  // Splits that drop what a property class matches.
  auto removing = [](const char* regex) {
    return Json{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Removed"}};
  };
  const std::string text = "x" + emoji + "E" + e_acute + "x";
  EXPECT_EQ(EncodeWith(none, removing("\\p{Extended_Pictographic}"), text), (Ids{8, 6, 1, 8}));
  EXPECT_EQ(EncodeWith(none, removing("\\p{Emoji_Presentation}"), text), (Ids{8, 6, 1, 8}));
  EXPECT_EQ(EncodeWith(none, removing("\\p{Lu}|\\N{LATIN SMALL LETTER E WITH ACUTE}"), text),
            (Ids{8, 7, 8}));
  EXPECT_EQ(EncodeWith(none, removing("[^\\p{L}\\p{N}]"), text), (Ids{8, 6, 1, 8}));
}

}  // namespace
}  // namespace attn
