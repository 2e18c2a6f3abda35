// The RWKV World vocabulary (model/text/rwkv_vocabulary.h) against a
// reference tokenizer written here the plain way (at each position, try
// every token from the longest), on texts of English, escapes, CJK, emoji
// and invalid UTF-8; its literals; its errors, each naming the line.
#include "model/text/rwkv_vocabulary.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/text/tokenizer.h"

namespace attn {
namespace {

// Every byte (as bytes literals and, for printable ASCII, str literals with
// escapes), then words, a CJK text split across tokens, emoji.
std::string Vocabulary() {
  std::string text;
  int64_t id = 1;
  for (int b = 0; b < 256; ++b) {
    std::string literal;
    if (b == '\\')
      literal = R"('\\')";
    else if (b == '\'')
      literal = R"("'")";
    else if (b == '\n')
      literal = R"('\n')";
    else if (b >= 0x20 && b < 0x7f)
      literal = absl::StrCat("'", std::string(1, static_cast<char>(b)), "'");
    else
      literal = absl::StrCat("b'\\x", absl::Hex(b, absl::kZeroPad2), "'");
    absl::StrAppend(&text, id++, " ", literal, " 1\n");
  }
  const char* more[] = {
      "'the' 3",         "' the' 4",
      "' river' 6",      "'river' 5",
      "\"it's\" 4",      "'\\n\\n' 2",
      "'\\t\\\\' 2",     "'日本' 6",
      "'本語' 6",        "'\\u00e9t\\u00e9' 5",
      "'🙂' 4",        "b'\\xe6\\x97\\xa5\\xe6' 4",
      "b'\\xaa\\x9e' 2", "' 🙂🙂' 9",
      "'\\x41\\102C' 3",
  };
  for (const char* line : more) absl::StrAppend(&text, id++, " ", line, "\n");
  return text;
}

// Greedy longest match, by trying every length at every position.
std::vector<int64_t> Reference(const std::map<std::string, int64_t>& ids, const std::string& s) {
  std::vector<int64_t> out;
  for (size_t at = 0; at < s.size();) {
    for (size_t length = s.size() - at; length > 0; --length) {
      auto it = ids.find(s.substr(at, length));
      if (it != ids.end()) {
        out.push_back(it->second);
        at += length;
        break;
      }
    }
  }
  return out;
}

TEST(RwkvVocabularyTest, EncodesAsTheReferenceAndDecodesBack) {
  auto vocab = RwkvVocabulary::Parse(Vocabulary());
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  std::map<std::string, int64_t> ids;
  for (int64_t id = 1; id < vocab->size(); ++id) ids[vocab->TokenBytes(id)] = id;
  EXPECT_EQ(vocab->TokenBytes(ids.at("it's")), "it's");
  EXPECT_EQ(ids.count("\t\\"), 1u);
  EXPECT_EQ(ids.count("ABC"), 1u);                // \x41, octal \102, C
  EXPECT_EQ(ids.count("\xc3\xa9t\xc3\xa9"), 1u);  // \u00e9 as UTF-8
  std::mt19937 random(5);
  const std::vector<std::string> pieces = {"the",  " river", "it's", "\n\n",     "日本語",
                                           "🙂", " ",      "\xff", "\xe6\x97", "x",
                                           "\t\\", "été",    "ABC"};
  for (int round = 0; round < 200; ++round) {
    std::string text;
    for (int i = 0; i < 12; ++i) text += pieces[random() % pieces.size()];
    const std::vector<int64_t> got = vocab->Encode(text);
    EXPECT_EQ(got, Reference(ids, text)) << text;
    std::string back;
    for (int64_t id : got) back += vocab->TokenBytes(id);
    EXPECT_EQ(back, text);
  }
}

TEST(RwkvVocabularyTest, TheTokenizerStreamsWholeCharactersOnly) {
  auto tokenizer = Tokenizer::FromRwkvVocabulary(Vocabulary());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(tokenizer->kind(), "rwkv-world");
  EXPECT_EQ(tokenizer->eos_id(), 0);
  const std::string text = "日本語 the 🙂🙂 river";
  const auto ids = tokenizer->Encode(text);
  EXPECT_EQ(tokenizer->Decode(ids), text);
  IncrementalDecoder decoder(*tokenizer);
  std::string streamed;
  for (int64_t id : ids) {
    const std::string piece = decoder.Push(id);
    EXPECT_TRUE(piece.empty() || (static_cast<unsigned char>(piece[0]) & 0xC0) != 0x80)
        << "a piece starts inside a character";
    streamed += piece;
  }
  streamed += decoder.Finish();
  EXPECT_EQ(streamed, text);
  auto again = Tokenizer::FromStored("rwkv-world", tokenizer->Serialized());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->Encode(text), ids);
}

TEST(RwkvVocabularyTest, PythonLiterals) {
  EXPECT_EQ(*ParsePythonLiteral(R"('a\'b')"), "a'b");
  EXPECT_EQ(*ParsePythonLiteral(R"(b'\xe4\xb8')"), "\xe4\xb8");
  EXPECT_EQ(*ParsePythonLiteral(R"('\u4e2d')"), "\xe4\xb8\xad");
  EXPECT_EQ(*ParsePythonLiteral(R"('\U0001F642')"), "\xf0\x9f\x99\x82");
  EXPECT_EQ(*ParsePythonLiteral(R"('\q')"), "\\q");  // Python keeps an unknown escape
  EXPECT_EQ(*ParsePythonLiteral(R"(r'\n')"), "\\n");
  EXPECT_EQ(*ParsePythonLiteral(R"('\x80')"), "\xc2\x80");  // a str's \x is a code point
  for (const char* bad : {"'abc", "abc", R"(b'é')", R"('\ud800')", R"('\x4')", R"('a'b')"}) {
    EXPECT_FALSE(ParsePythonLiteral(bad).ok()) << bad;
  }
}

TEST(RwkvVocabularyTest, AMalformedLineIsNamed) {
  const std::string base = Vocabulary();
  const int64_t next = 256 + 16;
  struct Case {
    std::string line;
    const char* says;
  };
  const Case cases[] = {
      {absl::StrCat(next, " 'ab' 3"), "the line says 3"},
      {absl::StrCat(next, " 'ab"), "expected ID LITERAL BYTE_LENGTH"},
      {absl::StrCat(next, " abc 3"), "not a quoted"},
      {"0 'zz' 2", "id is not a number from 1"},
      {"x 'zz' 2", "id is not a number"},
      {"5 'zz' 2", "id 5 again"},
      {absl::StrCat(next, " 'the' 3"), "the same bytes as id"},
  };
  const int64_t line_number = 256 + 15 + 1;
  for (const Case& c : cases) {
    auto vocab = RwkvVocabulary::Parse(base + c.line + "\n");
    ASSERT_FALSE(vocab.ok()) << c.line;
    EXPECT_TRUE(absl::StartsWith(vocab.status().message(), absl::StrCat("line ", line_number, ":")))
        << vocab.status();
    EXPECT_TRUE(absl::StrContains(vocab.status().message(), c.says)) << vocab.status();
  }
  auto missing = RwkvVocabulary::Parse("1 'a' 1\n");
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "single byte 0x00"))
      << missing.status();
}

}  // namespace
}  // namespace attn
