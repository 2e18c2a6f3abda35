#include "model/lm/config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/tiny_model.h"

namespace attn {
namespace {

LmConfig ConfigUnderTest(MixerKind kind) {
  LmConfig c = testing::SmallLmConfig(kind, 61);
  c.window = 8;
  c.max_context = 128;
  c.chunk = 16;
  return c;
}

TEST(LmConfig, JsonRoundTrips) {
  auto config = ConfigUnderTest(MixerKind::kAftLocal);
  config.norm = NormKind::kScaleNorm;
  config.positions = PositionKind::kLearned;
  auto parsed = LmConfig::FromJson(config.ToJson());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->ToJson(), config.ToJson());
  EXPECT_EQ(parsed->mixer, MixerKind::kAftLocal);
  EXPECT_EQ(parsed->norm, NormKind::kScaleNorm);
  EXPECT_EQ(parsed->positions, PositionKind::kLearned);
}

TEST(LmConfig, ErrorsNameTheField) {
  const std::string good = ConfigUnderTest(MixerKind::kAftConv).ToJson();
  struct Case {
    std::string from, to, message;
  };
  const std::vector<Case> cases = {
      {"\"heads\": 4", "\"heads\": 5", "divisible by heads"},
      {"\"d_model\": 32", "\"d_model\": -32", "d_model: must be positive"},
      {"\"mixer\": \"aft-conv\"", "\"mixer\": \"rnn\"", "mixer: unknown value \"rnn\""},
      {"\"layers\": 2", "\"layers\": \"2\"", "layers: must be an integer"},
      {"\"layers\": 2", "\"layers\": 2.5", "layers: must be an integer"},
      {"\"layers\": 2", "\"layerz\": 2", "layers: missing"},
      {"\"chunk\": 16", "\"chunk\": 16, \"dropout\": 0.1", "dropout: unknown config key"},
      {"}", "", "config: invalid JSON"},
  };
  for (const auto& c : cases) {
    std::string json = good;
    const auto at = json.find(c.from);
    ASSERT_NE(at, std::string::npos) << c.from;
    json.replace(at, c.from.size(), c.to);
    auto parsed = LmConfig::FromJson(json);
    ASSERT_FALSE(parsed.ok()) << json;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(parsed.status().message()).find(c.message), std::string::npos)
        << parsed.status();
  }
}

TEST(LmConfig, RejectsWhatIsNotAConfigObject) {
  for (const char* text : {"", "[]", "null", "{\"layers\": 2,}", "{\"layers\" 2}",
                           "{\"layers\": 2} x", "{\"mixer\": \"unterminated}"}) {
    auto parsed = LmConfig::FromJson(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(std::string(parsed.status().message()).rfind("config: ", 0), 0u) << parsed.status();
  }
}

TEST(LmConfig, ValuesOfAnotherTypeNameTheKey) {
  std::string json = ConfigUnderTest(MixerKind::kAftConv).ToJson();
  struct Case {
    std::string from, to, message;
  };
  for (const auto& [from, to, message] : std::vector<Case>{
           {"\"mixer\": \"aft-conv\"", "\"mixer\": 3", "mixer: must be a string, got 3"},
           {"\"heads\": 4", "\"heads\": [4]", "heads: must be an integer, got [4]"},
           {"\"window\": 8", "\"window\": null", "window: must be an integer, got null"}}) {
    std::string changed = json;
    const auto at = changed.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    changed.replace(at, from.size(), to);
    auto parsed = LmConfig::FromJson(changed);
    ASSERT_FALSE(parsed.ok()) << changed;
    EXPECT_EQ(parsed.status().message(), message);
  }
}

}  // namespace
}  // namespace attn
