// The compilers: GBNF, regular expressions and JSON Schema into grammars,
// their errors, and whole texts accepted or refused.
#include "model/grammar/grammar.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/grammar/constraint.h"
#include "model/grammar/json_schema.h"
#include "model/grammar/matcher.h"
#include "tests/grammar/test_grammars.h"
#include "util/field_error.h"

namespace attn::grammar {
namespace {

using Json = nlohmann::ordered_json;

using testing::Accepts;
using testing::Compile;
using testing::Schema;

TEST(Gbnf, ParsesLlamaCppGrammars) {
  // The shapes of llama.cpp's documented grammars: multi-line rules,
  // comments, groups, classes with escapes, repetition bounds.
  auto g = Grammar::FromGbnf(R"(# a list
root ::= "[" ws ( item ( "," ws item ){0,3} )? "]"   # up to four
item ::=
  [a-zA-Z_] [a-zA-Z0-9_]* |
  "\"" ( [^"\\\x00-\x1f] | "\\" ["\\nt] )* "\""
ws ::= [ \t\n]*)");
  ASSERT_TRUE(g.ok()) << g.status();
  auto shared = std::make_shared<const Grammar>(*std::move(g));
  EXPECT_TRUE(Accepts(shared, "[]"));
  EXPECT_TRUE(Accepts(shared, "[ a,b_1, \"x\\n\",d]"));
  EXPECT_FALSE(Accepts(shared, "[a,b,c,d,e]"));
  EXPECT_FALSE(Accepts(shared, "[1]"));
}

TEST(Gbnf, ErrorsNameTheLineOrRule) {
  const std::pair<const char*, const char*> cases[] = {
      {"root ::= x", "rule 'x' is used but never defined"},
      {"a ::= \"a\"", "no rule named 'root'"},
      {"root ::= root \"a\" | \"b\"", "rule 'root' is left-recursive"},
      {"root ::= a\na ::= \"b\"? a \"c\"", "rule 'a' is left-recursive"},
      {"root ::= \"a\"\n\nroot ::= \"b\"", "line 3: rule 'root' is defined twice"},
      {"root ::= \"abc", "line 1: unterminated literal"},
      {"root ::= [b-a]", "below its start"},
      {"root ::= (\"a\"", "missing )"},
      {"root ::= \"a\"{5,2}", "maximum is below its minimum"},
      {"root ::= \"a\"{2000}", "repetition bound above 1000"},
      {"root ::= \"\\q\"", "unknown escape \\q"},
      {"root ::= @", "unexpected character '@'"},
  };
  for (const auto& [text, message] : cases) {
    auto g = Grammar::FromGbnf(text);
    ASSERT_FALSE(g.ok()) << text;
    EXPECT_NE(g.status().message().find(message), std::string::npos)
        << text << " -> " << g.status().message();
  }
}

TEST(Gbnf, LimitsBoundUntrustedGrammars) {
  GrammarLimits limits;
  limits.max_elements = 1000;
  EXPECT_FALSE(Grammar::FromGbnf("root ::= [a-z]{600} [0-9]{600}", limits).ok());
  // A repetition of what may match nothing is no left recursion.
  EXPECT_TRUE(Grammar::FromGbnf("root ::= (\"a\"?)* \"b\" ( \"\" | \"c\" ){2,}").ok());
  // Repeating a group repeats a reference to it: no blow-up.
  EXPECT_TRUE(Grammar::FromGbnf("root ::= (\"abc\"{100}){100}", limits).ok());
  std::string deep = "root ::= ";
  for (int i = 0; i < 100; ++i) deep += "(";
  deep += "\"a\"";
  for (int i = 0; i < 100; ++i) deep += ")";
  auto g = Grammar::FromGbnf(deep);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("nested deeper"), std::string::npos);
}

TEST(Regex, WholeMatchAndSearch) {
  auto g = Compile(OutputConstraint::Regex(R"(\d{3}-[A-Z]{2}(x|yz)?)"));
  EXPECT_TRUE(Accepts(g, "123-AB"));
  EXPECT_TRUE(Accepts(g, "123-ABx"));
  EXPECT_TRUE(Accepts(g, "123-AByz"));
  EXPECT_FALSE(Accepts(g, "12-AB"));
  EXPECT_FALSE(Accepts(g, "123-ABy"));
  // JSON Schema's pattern searches unless anchored, inside a JSON string.
  auto s = Schema(R"({"type":"string","pattern":"ab+"})");
  EXPECT_TRUE(Accepts(s, R"("xxabbby")"));
  EXPECT_TRUE(Accepts(s, R"("\"ab\\")"));
  EXPECT_FALSE(Accepts(s, R"("axb")"));
  auto anchored = Schema(R"({"type":"string","pattern":"^a.c$"})");
  EXPECT_TRUE(Accepts(anchored, R"("a\"c")"));
  EXPECT_TRUE(Accepts(anchored,
                      "\"a\xC3\xA9"
                      "c\""));
  EXPECT_FALSE(Accepts(anchored, R"("xabc")"));
}

TEST(Regex, RefusesWhatItCannotEnforce) {
  for (const char* pattern : {"(a)\\1", "a(?=b)", "a\\bc", "a^b", "a$b", "[z-a]", "a**", "a{0,,5}",
                              "a{,3}", "a{7,5}", "a{2000}"}) {
    EXPECT_FALSE(ConstraintGbnf(OutputConstraint::Regex(pattern)).ok()) << pattern;
  }
}

TEST(JsonSchema, IntegerRangesAreExact) {
  const std::pair<const char*, std::pair<int, int>> cases[] = {
      {R"({"type":"integer","minimum":-37,"maximum":214})", {-37, 214}},
      {R"({"type":"integer","exclusiveMinimum":9,"exclusiveMaximum":100})", {10, 99}},
      {R"({"type":"integer","minimum":0})", {0, 100000}},
      {R"({"type":"integer","maximum":-3})", {-100000, -3}},
      {R"({"type":"integer","minimum":105,"maximum":1999})", {105, 1999}},
  };
  for (const auto& [schema, range] : cases) {
    auto g = Schema(schema);
    for (int v = -400; v <= 2100; ++v) {
      EXPECT_EQ(Accepts(g, std::to_string(v)), v >= range.first && v <= range.second)
          << schema << " " << v;
    }
    EXPECT_FALSE(Accepts(g, "007"));
  }
}

TEST(JsonSchema, NumberRanges) {
  auto g = Schema(R"({"type":"number","minimum":-2,"maximum":3})");
  for (const char* ok : {"0", "3", "3.000", "-2", "-1.999", "2.5", "-0.5", "0.0001"}) {
    EXPECT_TRUE(Accepts(g, ok)) << ok;
  }
  for (const char* bad : {"3.01", "-2.1", "4", "-3", "1e2", "01"})
    EXPECT_FALSE(Accepts(g, bad)) << bad;
}

TEST(JsonSchema, ObjectsKeepDeclaredOrderAndRequired) {
  auto g = Schema(R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"boolean"},
      "c":{"type":"null"}},"required":["b"],"additionalProperties":false})");
  EXPECT_TRUE(Accepts(g, R"({"b":true})"));
  EXPECT_TRUE(Accepts(g, R"({"a":"x","b":false,"c":null})"));
  EXPECT_TRUE(Accepts(g, R"({"b":true,"c":null})"));
  EXPECT_FALSE(Accepts(g, R"({})"));
  EXPECT_FALSE(Accepts(g, R"({"a":"x"})"));
  EXPECT_FALSE(Accepts(g, R"({"b":true,"d":1})"));
  EXPECT_FALSE(Accepts(g, R"({"b":true,})"));
  auto spaced = Schema(R"({"type":"object","properties":{"a":{"type":"integer"}}})", 2);
  EXPECT_TRUE(Accepts(spaced, "{ \"a\" : 1 }"));
  EXPECT_TRUE(Accepts(spaced, "{\n  \"a\": 1\n}"));
  EXPECT_TRUE(Accepts(spaced, "{}"));
  EXPECT_FALSE(Accepts(spaced, "{    \"a\":1}"));
}

TEST(JsonSchema, ArraysTuplesAndCounts) {
  auto g = Schema(R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],
      "items":{"type":"boolean"},"minItems":1,"maxItems":3})");
  EXPECT_TRUE(Accepts(g, "[1]"));
  EXPECT_TRUE(Accepts(g, R"([1,"a"])"));
  EXPECT_TRUE(Accepts(g, R"([1,"a",true])"));
  EXPECT_FALSE(Accepts(g, "[]"));
  EXPECT_FALSE(Accepts(g, R"([1,"a",true,false])"));
  EXPECT_FALSE(Accepts(g, R"(["a"])"));
  auto counted = Schema(R"({"type":"array","items":{"const":7},"minItems":2,"maxItems":3})");
  EXPECT_FALSE(Accepts(counted, "[7]"));
  EXPECT_TRUE(Accepts(counted, "[7,7]"));
  EXPECT_TRUE(Accepts(counted, "[7,7,7]"));
  EXPECT_FALSE(Accepts(counted, "[7,7,7,7]"));
}

TEST(JsonSchema, RefsRecursionAndCombinators) {
  auto tree = Schema(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
      "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},
      "$ref":"#/$defs/node"})");
  EXPECT_TRUE(Accepts(tree, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]})"));
  EXPECT_FALSE(Accepts(tree, R"({"v":1,"kids":[{}]})"));
  auto any = Schema(R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":2}]})");
  EXPECT_TRUE(Accepts(any, "12"));
  EXPECT_TRUE(Accepts(any, R"("ab")"));
  EXPECT_FALSE(Accepts(any, R"("abc")"));
  auto formats = Schema(R"({"type":"array","items":[{"format":"uuid"},{"format":"date"},
      {"format":"ipv4"},{"format":"email"}]})");
  EXPECT_TRUE(Accepts(
      formats, R"(["123e4567-e89b-12d3-a456-426614174000","2024-02-29","10.0.255.1","a.b@c.io"])"));
  EXPECT_FALSE(Accepts(formats, R"(["123e4567","2024-02-29","10.0.255.1","a@b.c"])"));
  EXPECT_FALSE(Accepts(
      formats, R"(["123e4567-e89b-12d3-a456-426614174000","2024-13-01","1.1.1.1","a@b.c"])"));
}

TEST(JsonSchema, FormatsAreExact) {
  auto date = Schema(R"({"type":"string","format":"date"})");
  for (const char* ok : {"2024-02-29", "2000-02-29", "1999-12-31", "2023-04-30", "0004-02-29"}) {
    EXPECT_TRUE(Accepts(date, absl::StrCat("\"", ok, "\""))) << ok;
  }
  for (const char* bad : {"2023-02-29", "1900-02-29", "2024-02-30", "2024-04-31", "2024-13-01",
                          "2024-00-10", "2024-1-01"}) {
    EXPECT_FALSE(Accepts(date, absl::StrCat("\"", bad, "\""))) << bad;
  }
  auto uri = Schema(R"({"type":"string","format":"uri"})");
  for (const char* ok : {"https://example.com/a/b?x=1#top", "urn:isbn:0451450523", "mailto:a@b.org",
                         "http://user:pw@host:8080/p%20q", "file:///etc/hosts"}) {
    EXPECT_TRUE(Accepts(uri, absl::StrCat("\"", ok, "\""))) << ok;
  }
  for (const char* bad : {"no-scheme", "http://a b", "http://h:x/", "a:#x#y", "1a:b", "a:%zz"}) {
    EXPECT_FALSE(Accepts(uri, absl::StrCat("\"", bad, "\""))) << bad;
  }
}

TEST(JsonSchema, OneOfWithADiscriminatorAndLargeBounds) {
  auto g = Schema(R"({"oneOf":[
      {"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},"required":["kind"]},
      {"type":"object","properties":{"kind":{"enum":["b","c"]},"y":{"type":"string"}},"required":["kind"]}]})");
  EXPECT_TRUE(Accepts(g, R"({"kind":"a","x":1})"));
  EXPECT_TRUE(Accepts(g, R"({"kind":"c","y":"z"})"));
  EXPECT_FALSE(Accepts(g, R"({"kind":"d","x":1})"));
  // Undeclared properties are allowed unless additionalProperties says no.
  EXPECT_TRUE(Accepts(g, R"({"kind":"a","y":"z"})"));
  EXPECT_FALSE(Accepts(g, R"({"kind":"a","x":"1"})"));
  auto closed = Schema(R"({"oneOf":[{"type":"object","properties":{"p":{}},"required":["p"],
      "additionalProperties":false},{"type":"object","properties":{"q":{}},"required":["q"],
      "additionalProperties":false}]})");
  EXPECT_TRUE(Accepts(closed, R"({"p":1})"));
  // Bounds past 1,000 write at most 1,000; unknown formats are annotations.
  auto big = Schema(R"({"type":"string","maxLength":65535,"format":"x-my-id"})");
  EXPECT_TRUE(Accepts(big, absl::StrCat("\"", std::string(1000, 'a'), "\"")));
  EXPECT_FALSE(Accepts(big, absl::StrCat("\"", std::string(1001, 'a'), "\"")));
  auto host = Schema(R"({"type":"string","format":"hostname"})");
  EXPECT_TRUE(Accepts(host, R"("api.example-1.com")"));
  EXPECT_FALSE(Accepts(host, R"("-bad.com")"));
  auto b64 = Schema(R"({"type":"string","format":"byte"})");
  EXPECT_TRUE(Accepts(b64, R"("aGVsbG8=")"));
  EXPECT_FALSE(Accepts(b64, R"("aGVsbG8")"));
}

TEST(JsonSchema, AllOfAndSiblingsMerge) {
  auto g = Schema(R"({"allOf":[{"type":"string"},{"maxLength":3}]})");
  EXPECT_TRUE(Accepts(g, R"("ab")"));
  EXPECT_FALSE(Accepts(g, R"("abcd")"));
  auto ref = Schema(R"({"$defs":{"base":{"type":"object","properties":{"a":{"type":"integer"}}}},
      "$ref":"#/$defs/base","required":["a"]})");
  EXPECT_TRUE(Accepts(ref, R"({"a":1})"));
  EXPECT_FALSE(Accepts(ref, R"({})"));
  auto branches = Schema(R"({"type":"object","required":["k"],"anyOf":[
      {"properties":{"k":{"const":"x"},"n":{"type":"integer"}}},
      {"properties":{"k":{"const":"y"},"s":{"type":"string"}}}]})");
  EXPECT_TRUE(Accepts(branches, R"({"k":"x","n":2})"));
  EXPECT_TRUE(Accepts(branches, R"({"k":"y","s":"t"})"));
  EXPECT_TRUE(Accepts(branches, R"({"k":"y","n":2})"));  // n is undeclared there
  EXPECT_FALSE(Accepts(branches, R"({"k":"y","s":2})"));
  EXPECT_FALSE(Accepts(branches, R"({"n":2})"));
}

TEST(JsonSchema, UnsupportedKeywordsAreRefusedByPath) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type":"object","properties":{"a":{"type":"number","multipleOf":3}}})",
       ".properties.a.multipleOf"},
      {R"({"type":"object","propertyNames":{"maxLength":3}})", ".propertyNames"},
      {R"({"type":"object","patternProperties":{"a(?=b)c":{}}})", ".patternProperties.a(?=b)c"},
      {R"({"type":"string","not":{"pattern":"^a"}})", ".not.pattern"},
      {R"({"type":"object","properties":{"a":{}},"required":["a"],"not":{"required":["a"]}})",
       ".not.required"},
      {R"({"type":"array","items":{"type":"string","format":"idn-hostname"}})", ".items.format"},
      {R"({"oneOf":[{"type":"string"},{"type":"string","maxLength":3}]})", ".oneOf"},
      {R"({"$ref":"#/$defs/missing"})", ".$ref"},
      {R"({"type":"integer","not":{"const":3}})", ".not"},
      {R"({"type":"string","pattern":"(a)\\1"})", ".pattern"},
      {R"({"allOf":[{"type":"string"},{"type":"integer"}]})", ".type"},
      {R"({"allOf":[{"properties":{"a":{}},"additionalProperties":false},{"properties":{"b":{}}}]})",
       ".additionalProperties"},
      {R"({"type":"object","properties":{"a":false},"required":["a"]})", ".properties.a"},
  };
  for (const auto& [schema, field] : cases) {
    auto g = ConstraintGbnf(OutputConstraint::JsonSchema(Json::parse(schema)));
    ASSERT_FALSE(g.ok()) << schema;
    EXPECT_EQ(FieldOf(g.status()), field) << schema << " -> " << g.status();
  }
  // Annotations, and keywords JSON Schema does not define, are accepted.
  EXPECT_NE(Schema(R"({"type":"integer","x-unit":"kg","id":"urn:x","self":{"vendor":"v"}})"),
            nullptr);
  EXPECT_NE(Schema(R"({"title":"t","description":"d","examples":[1],"default":1,"$comment":"c",
      "type":"integer"})"),
            nullptr);
}

TEST(Constraint, ChoicesAndTheCache) {
  OutputConstraint c = OutputConstraint::Choice({"yes", "no", "n/a \"x\""});
  CompileInfo first, second;
  auto a = GrammarCache::Shared().Get(c, &first);
  auto b = GrammarCache::Shared().Get(c, &second);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_TRUE(second.cached);
  EXPECT_TRUE(Accepts(*a, "n/a \"x\""));
  EXPECT_FALSE(Accepts(*a, "ye"));
  EXPECT_TRUE(Accepts(Compile(OutputConstraint::JsonObject()), "{\"k\": [1, {}]}"));
}

// A choice holding invalid UTF-8 (proto2 text reaches the server as sent) is
// refused with a reason, never thrown on; choices that differ only in how
// they split are cached apart.
TEST(Constraint, ChoicesWithInvalidUtf8AreRefused) {
  EXPECT_NE(OutputConstraint::Choice({"ab", "c"}).Key(),
            OutputConstraint::Choice({"a", "bc"}).Key());
  EXPECT_NE(OutputConstraint::Choice({"a\xff"}).Key(), OutputConstraint::Choice({"a\xfe"}).Key());
  auto bad = GrammarCache::Shared().Get(OutputConstraint::Choice({"ok", "a\xff"}));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("UTF-8"), absl::string_view::npos) << bad.status();
}

}  // namespace
}  // namespace attn::grammar
