// JSON Schema's object and negation keywords: undeclared properties,
// patternProperties, property counts and `not`, judged on whole texts.
// Every text a grammar accepts must validate; where the grammar writes a
// subset, only valid texts are asserted accepted.
#include <gtest/gtest.h>

#include "tests/grammar/test_grammars.h"

namespace attn::grammar {
namespace {

using testing::Accepts;
using testing::Schema;

TEST(JsonSchemaObjects, UndeclaredPropertiesFollowTheDeclaredOnes) {
  auto g =
      Schema(R"({"type":"object","properties":{"a":{"type":"string"},"ab":{"type":"integer"}}})");
  EXPECT_TRUE(Accepts(g, R"({"a":"x","b":[1]})"));
  EXPECT_TRUE(Accepts(g, R"({"a":"x","abc":1,"":2,"\n":3})"));
  EXPECT_TRUE(Accepts(g, R"({"zz":null})"));
  // A declared name is never written as an undeclared one, escaped or not.
  EXPECT_FALSE(Accepts(g, R"({"a":"x","a":1})"));
  EXPECT_FALSE(Accepts(g, R"({"b":1,"ab":"s"})"));
  EXPECT_FALSE(Accepts(g, R"({"\u0061":1})"));
  auto typed = Schema(
      R"({"type":"object","properties":{"a":{}},"additionalProperties":{"type":"integer"}})");
  EXPECT_TRUE(Accepts(typed, R"({"a":"x","z":1})"));
  EXPECT_FALSE(Accepts(typed, R"({"a":"x","z":"s"})"));
  auto closed = Schema(R"({"type":"object","properties":{"a":{}},"additionalProperties":false})");
  EXPECT_FALSE(Accepts(closed, R"({"a":1,"b":1})"));
}

TEST(JsonSchemaObjects, PatternPropertiesJudgeKeysAndValues) {
  auto g = Schema(R"({"type":"object","patternProperties":{"^x-":{"type":"integer"}},
      "additionalProperties":false})");
  EXPECT_TRUE(Accepts(g, R"({"x-a":1,"x-":2})"));
  EXPECT_TRUE(Accepts(g, R"({})"));
  EXPECT_FALSE(Accepts(g, R"({"x-a":"s"})"));
  EXPECT_FALSE(Accepts(g, R"({"y":1})"));
  // A declared property whose name matches satisfies both schemas.
  auto both = Schema(R"({"type":"object","properties":{"x-b":{"minimum":5}},
      "patternProperties":{"^x-":{"type":"integer"}}})");
  EXPECT_TRUE(Accepts(both, R"({"x-b":6})"));
  EXPECT_FALSE(Accepts(both, R"({"x-b":4})"));
  EXPECT_FALSE(Accepts(both, R"({"x-b":"s"})"));
  // Other keys carry values every pattern's schema accepts.
  EXPECT_TRUE(Accepts(both, R"({"x-b":6,"x-c":1,"q":2})"));
  EXPECT_FALSE(Accepts(both, R"({"x-b":6,"x-c":"s"})"));
}

TEST(JsonSchemaObjects, PropertyCountsBoundUndeclaredMembers) {
  auto g = Schema(R"({"type":"object","additionalProperties":{"type":"integer"},
      "minProperties":2,"maxProperties":3})");
  EXPECT_FALSE(Accepts(g, R"({"a":1})"));
  EXPECT_TRUE(Accepts(g, R"({"a":1,"b":2})"));
  EXPECT_TRUE(Accepts(g, R"({"a":1,"b":2,"c":3})"));
  EXPECT_FALSE(Accepts(g, R"({"a":1,"b":2,"c":3,"d":4})"));
}

TEST(JsonSchemaNot, TypesConstantsAndRequired) {
  auto no_string = Schema(R"({"not":{"type":"string"}})");
  EXPECT_TRUE(Accepts(no_string, "1"));
  EXPECT_TRUE(Accepts(no_string, "null"));
  EXPECT_FALSE(Accepts(no_string, R"("s")"));
  auto not_listed = Schema(R"({"type":"string","not":{"enum":["a","bc"]}})");
  for (const char* ok : {R"("b")", R"("abc")", R"("")", R"("b\"")"}) {
    EXPECT_TRUE(Accepts(not_listed, ok)) << ok;
  }
  for (const char* bad : {R"("a")", R"("bc")", R"("\u0061")", "1"}) {
    EXPECT_FALSE(Accepts(not_listed, bad)) << bad;
  }
  auto fewer = Schema(R"({"enum":[1,2,3],"not":{"const":2}})");
  EXPECT_TRUE(Accepts(fewer, "1"));
  EXPECT_FALSE(Accepts(fewer, "2"));
  auto lacking = Schema(R"({"type":"object","not":{"required":["a"]}})");
  EXPECT_TRUE(Accepts(lacking, R"({})"));
  EXPECT_TRUE(Accepts(lacking, R"({"b":1})"));
  EXPECT_FALSE(Accepts(lacking, R"({"a":1})"));
  EXPECT_FALSE(Accepts(lacking, R"({"b":1,"a":1})"));
}

TEST(JsonSchemaNot, CombinatorsAndDoubleNegation) {
  auto twice = Schema(R"({"not":{"not":{"type":"integer"}}})");
  EXPECT_TRUE(Accepts(twice, "7"));
  EXPECT_FALSE(Accepts(twice, R"("s")"));
  auto neither = Schema(R"({"not":{"anyOf":[{"type":"string"},{"type":"null"}]}})");
  EXPECT_TRUE(Accepts(neither, "true"));
  EXPECT_FALSE(Accepts(neither, R"("s")"));
  EXPECT_FALSE(Accepts(neither, "null"));
  // not (A and B) takes one of not A, not B: whatever it writes is valid.
  auto one = Schema(R"({"type":"object","properties":{"k":{"type":"string"}},
      "not":{"allOf":[{"required":["k"]},{"properties":{"k":{"const":"x"}}}]}})");
  EXPECT_TRUE(Accepts(one, R"({})"));
  EXPECT_FALSE(Accepts(one, R"({"k":"x"})"));
  auto forbidden = Schema(R"({"type":"object","properties":{"a":{"not":{}},"b":{}}})");
  EXPECT_TRUE(Accepts(forbidden, R"({"b":1})"));
  EXPECT_FALSE(Accepts(forbidden, R"({"a":1})"));
}

}  // namespace
}  // namespace attn::grammar
