#include "util/utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace attn {
namespace {

TEST(Utf8, ValidatesRfc3629) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain"));
  EXPECT_TRUE(IsValidUtf8("caf\xC3\xA9 \xF0\x9F\x98\x80"));  // é, an emoji
  EXPECT_FALSE(IsValidUtf8("\xC3"));                         // cut short
  EXPECT_FALSE(IsValidUtf8("\xFF"));                         // never valid
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));                     // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));                 // a surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));             // past U+10FFFF
  EXPECT_FALSE(IsValidUtf8("a\x80"));                        // a stray continuation
}

TEST(Utf8, TakesWholeCharactersAndReplacesInvalidOnes) {
  std::string out;
  // A whole emoji, then the first 2 of its 4 bytes: the rest may follow.
  EXPECT_EQ(TakeCompleteUtf8("a\xF0\x9F\x98\x80\xF0\x9F", &out), 5u);
  EXPECT_EQ(out, "a\xF0\x9F\x98\x80");
  out.clear();
  // Invalid sequences become one U+FFFD each: a lone 0xFF, a surrogate's
  // first byte followed by a byte it cannot take, an overlong lead.
  EXPECT_EQ(TakeCompleteUtf8("\xFF"
                             "b"
                             "\xED\xA0"
                             "c"
                             "\xC0\xAF",
                             &out),
            7u);
  EXPECT_EQ(out,
            "\xEF\xBF\xBD"
            "b"
            "\xEF\xBF\xBD\xEF\xBF\xBD"
            "c"
            "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_TRUE(IsValidUtf8(out));
}

TEST(Utf8, ScanSaysWhatStartsAtAnOffset) {
  EXPECT_EQ(ScanUtf8("\xC3\xA9", 0).kind, Utf8Char::Kind::kComplete);
  EXPECT_EQ(ScanUtf8("\xC3\xA9", 0).length, 2u);
  EXPECT_EQ(ScanUtf8("\xE2\x82", 0).kind, Utf8Char::Kind::kIncomplete);
  EXPECT_EQ(ScanUtf8("\xE2\x41", 0).kind, Utf8Char::Kind::kInvalid);
  EXPECT_EQ(ScanUtf8("\xE2\x41", 0).length, 1u);
  EXPECT_EQ(ScanUtf8("\xF0\x9F\x98\x41", 0).length, 3u);  // the maximal subpart
}

}  // namespace
}  // namespace attn
