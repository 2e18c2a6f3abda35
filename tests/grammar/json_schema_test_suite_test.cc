// The JSON-Schema-Test-Suite (json-schema-org; SOURCES.tsv in
// tests/data/json-schema-test-suite) for the keywords the compiler
// claims: every schema either compiles or is refused naming a field, and a
// compiled grammar never accepts an instance the suite calls invalid.
// Grammars write valid subsets (declared property order, formats enforced
// where the 2020-12 suite treats them as annotations), so valid instances
// are counted, with a floor, rather than each required.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "model/grammar/constraint.h"
#include "tests/grammar/test_grammars.h"
#include "util/field_error.h"

namespace attn::grammar {
namespace {

using Json = nlohmann::ordered_json;

TEST(JsonSchemaTestSuite, NoInvalidInstanceIsAccepted) {
  const std::string dir = std::string(ATTN_SOURCE_DIR) + "/tests/data/json-schema-test-suite";
  int groups = 0, compiled = 0, valid = 0, valid_accepted = 0, invalid = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    for (const auto& group : Json::parse(text.str())) {
      ++groups;
      const std::string where =
          entry.path().filename().string() + ": " + group["description"].get<std::string>();
      auto grammar = GrammarCache::Shared().Get(OutputConstraint::JsonSchema(group["schema"]));
      if (!grammar.ok()) {
        EXPECT_EQ(grammar.status().code(), absl::StatusCode::kInvalidArgument) << where;
        continue;
      }
      ++compiled;
      for (const auto& test : group["tests"]) {
        const std::string instance = test["data"].dump();
        const bool accepted = testing::Accepts(*grammar, instance);
        if (test["valid"].get<bool>()) {
          ++valid;
          valid_accepted += accepted;
        } else {
          ++invalid;
          EXPECT_FALSE(accepted) << where << " / " << test["description"] << ": " << instance;
        }
      }
    }
  }
  std::cout << groups << " groups, " << compiled << " compiled; valid instances accepted "
            << valid_accepted << " of " << valid << "; invalid ones refused: " << invalid << "\n";
  // Floors at what the compiler reached on 2026-11-27: raise them as it grows.
  EXPECT_GE(compiled, 141);
  EXPECT_GE(valid_accepted, 283);
}

}  // namespace
}  // namespace attn::grammar
