// A model's own chat template (model/text/chat_template.h): which file
// wins, named templates, special tokens as tokenizer_config.json writes
// them, errors that name the file and line, the tool-call format read from
// the real templates of tests/data/chat_templates, and the detokenizer's
// clean-up.
#include "model/text/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_split.h"

namespace attn {
namespace {

namespace fs = std::filesystem;

class ChatTemplateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  fs::path dir_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

TEST_F(ChatTemplateTest, ChatTemplateJinjaWinsOverTheConfigAndTheFlagOverBoth) {
  Write("tokenizer_config.json",
        R"({"chat_template": "config {{ bos_token }}", "clean_up_tokenization_spaces": true,
            "bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>"})");
  auto from_config = ReadChatTemplate(dir_.string(), "");
  ASSERT_TRUE(from_config.ok()) << from_config.status();
  EXPECT_EQ(from_config->source, "tokenizer_config.json");
  EXPECT_EQ(from_config->bos_token, "<s>");
  EXPECT_EQ(from_config->eos_token, "</s>");
  EXPECT_TRUE(from_config->clean_up_tokenization_spaces);

  Write("chat_template.jinja", "file {{ eos_token }}");
  auto from_file = ReadChatTemplate(dir_.string(), "");
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_EQ(from_file->source, "chat_template.jinja");
  auto chat = ChatTemplate::Create(*from_file);
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(*(*chat)->Render({}, true), "file </s>");

  const std::string flag = Write("mine.jinja", "mine {{ messages | length }}");
  auto overridden = ReadChatTemplate(dir_.string(), flag);
  ASSERT_TRUE(overridden.ok()) << overridden.status();
  EXPECT_EQ(overridden->source, "mine.jinja");
  EXPECT_EQ(overridden->bos_token, "<s>");  // the tokens still come from the config
  // What a package records reads back the same.
  auto round_trip = ChatTemplateConfig::FromJson(overridden->ToJson());
  ASSERT_TRUE(round_trip.ok()) << round_trip.status();
  EXPECT_EQ(round_trip->templates, overridden->templates);
  EXPECT_EQ(round_trip->bos_token, "<s>");
  EXPECT_TRUE(round_trip->clean_up_tokenization_spaces);
}

TEST_F(ChatTemplateTest, NamedTemplatesRenderToolUseWithTools) {
  Write("tokenizer_config.json", R"({"chat_template": [
      {"name": "default", "template": "plain"},
      {"name": "tool_use", "template": "tools: {{ tools | map(attribute='name') | join(',') }}"}]})");
  auto config = ReadChatTemplate(dir_.string(), "");
  ASSERT_TRUE(config.ok()) << config.status();
  auto chat = ChatTemplate::Create(*config);
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(*(*chat)->Render({{"user", "hi"}}, true), "plain");
  EXPECT_EQ(*(*chat)->Render({{"user", "hi"}}, true, R"([{"name": "a"}, {"name": "b"}])"),
            "tools: a,b");
}

TEST_F(ChatTemplateTest, MessagesReachTheTemplateWithTheirKeys) {
  ChatTemplateConfig config;
  config.templates["default"] =
      "{% for m in messages %}{{ m.keys() | list }}{{ m.tool_calls[0].function.arguments.city "
      "if m.tool_calls is defined }};{% endfor %}";
  auto chat = ChatTemplate::Create(config);
  ASSERT_TRUE(chat.ok());
  ChatMessage call{"assistant", ""};
  call.json = R"({"role": "assistant", "tool_calls": [{"function": {"name": "w",
                  "arguments": {"city": "Paris"}}}]})";
  auto text = (*chat)->Render({{"user", "hi"}, call}, false);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "['role', 'content'];['role', 'tool_calls']Paris;");
}

TEST_F(ChatTemplateTest, ErrorsNameTheFileAndLine) {
  Write("chat_template.jinja", "ok\n{% if %}");
  auto bad = ReadChatTemplate(dir_.string(), "");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("chat_template.jinja"), std::string::npos);
  EXPECT_NE(std::string(bad.status().message()).find("line 2"), std::string::npos) << bad.status();
  fs::remove(dir_ / "chat_template.jinja");
  Write("tokenizer_config.json", R"({"chat_template": 7})");
  EXPECT_FALSE(ReadChatTemplate(dir_.string(), "").ok());
  Write("tokenizer_config.json", "{not json");
  EXPECT_FALSE(ReadChatTemplate(dir_.string(), "").ok());
  // No files at all: no template, nothing to record.
  fs::remove(dir_ / "tokenizer_config.json");
  EXPECT_EQ(ReadChatTemplate(dir_.string(), (dir_ / "missing.jinja").string()).status().code(),
            absl::StatusCode::kNotFound);
  auto none = ReadChatTemplate(dir_.string(), "");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_F(ChatTemplateTest, TheTemplatesOwnRefusalComesBack) {
  ChatTemplateConfig config;
  config.source = "tokenizer_config.json";
  config.templates["default"] = "{{ raise_exception('Roles must alternate') }}";
  auto chat = ChatTemplate::Create(config);
  ASSERT_TRUE(chat.ok());
  auto text = (*chat)->Render({{"user", "a"}}, true);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(text.status().message()).find("Roles must alternate"), std::string::npos);
}

// The format column of tests/data/chat_templates/SOURCES.tsv is what the
// detection reads from each real template.
TEST(ChatTemplateFormatTest, RealTemplatesToolCallFormats) {
  const std::string data = std::string(ATTN_SOURCE_DIR) + "/tests/data/chat_templates/";
  std::istringstream manifest(ReadFile(data + "SOURCES.tsv"));
  std::string line;
  int checked = 0;
  while (std::getline(manifest, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> fields = absl::StrSplit(line, '\t');
    ASSERT_GE(fields.size(), 3u) << line;
    const std::string expected = fields[2] == "-" ? "" : fields[2];
    EXPECT_EQ(DetectToolCallFormat(ReadFile(data + fields[0] + ".jinja")), expected) << fields[0];
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

TEST(ChatTemplateFormatTest, CleanUpTokenizationSpaces) {
  EXPECT_EQ(CleanUpTokenizationSpaces("Hello , world ! I do n't know . It 's here ' s"),
            "Hello, world! I don't know. It's here's");
  EXPECT_EQ(CleanUpTokenizationSpaces("no change"), "no change");
}

}  // namespace
}  // namespace attn
