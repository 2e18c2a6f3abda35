#include "model/flat_json.h"

#include <gtest/gtest.h>

namespace attn {
namespace {

TEST(FlatJson, RoundTripsEveryType) {
  FlatJson json;
  json.SetString("name", "quote \" backslash \\ newline \n tab \t");
  json.SetInt("layers", -12);
  json.SetDouble("lr", 3e-4);
  json.SetBool("tied", true);
  auto parsed = FlatJson::Parse(json.Serialize());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed->GetString("name"), "quote \" backslash \\ newline \n tab \t");
  EXPECT_EQ(*parsed->GetInt("layers"), -12);
  EXPECT_DOUBLE_EQ(*parsed->GetDouble("lr"), 3e-4);
  EXPECT_TRUE(*parsed->GetBool("tied"));
  EXPECT_EQ(parsed->Serialize(), json.Serialize());
}

TEST(FlatJson, RejectsWhatIsNotAFlatObject) {
  for (const char* text :
       {"", "[]", "{\"a\": {}}", "{\"a\": [1]}", "{\"a\": null}", "{\"a\": 1,}", "{\"a\" 1}",
        "{\"a\": 1} x", "{\"a\": 1, \"a\": 2}", "{\"a\": 1.2.3}", "{\"a\": \"unterminated}"}) {
    EXPECT_FALSE(FlatJson::Parse(text).ok()) << text;
  }
}

TEST(FlatJson, GettersNameTheKeyAndType) {
  auto json = FlatJson::Parse("{\"layers\": 2.5, \"mixer\": 3}");
  ASSERT_TRUE(json.ok());
  EXPECT_EQ(json->GetInt("layers").status().message(), "\"layers\" must be an integer");
  EXPECT_EQ(json->GetString("mixer").status().message(), "\"mixer\" must be a string");
  EXPECT_EQ(json->GetBool("absent").status().message(), "missing \"absent\"");
}

}  // namespace
}  // namespace attn
