// Reading public checkpoints (model/checkpoints/): safetensors bytes built
// here by the format's definition; torch.save archives written by Debian's
// PyTorch (the one tool that writes them), a pickle that calls a function
// among them; RWKV-7 state dicts whose tensors are missing, extra, misshaped
// or of another RWKV generation. Every refusal names what is wrong. The
// numbers of an import are proven end to end
// (tests/server/rwkv7_checkpoint_serves.sh).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "model/checkpoints/granite_checkpoint.h"
#include "model/checkpoints/hf_registry.h"
#include "model/checkpoints/lfm2_checkpoint.h"
#include "model/checkpoints/rwkv7_checkpoint.h"
#include "model/checkpoints/safetensors.h"
#include "model/checkpoints/torch_checkpoint.h"
#include "nlohmann/json.hpp"
#include "tests/test_corpus.h"

namespace attn {
namespace {

// A safetensors file: the header's length, the header, the data.
std::string Safetensors(const nlohmann::json& header, const std::string& data) {
  const std::string text = header.dump();
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  return bytes + text + data;
}

std::string Floats(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

TEST(SafetensorsTest, ReadsF32F16AndBf16AsFloat) {
  const uint16_t half_one = 0x3C00, bf16_two = 0x4000;
  std::string data = Floats({1.5f, -2.0f, 3.0f, 4.25f});
  data.append(reinterpret_cast<const char*>(&half_one), 2);
  data.append(reinterpret_cast<const char*>(&bf16_two), 2);
  const nlohmann::json header = {
      {"__metadata__", {{"format", "pt"}}},
      {"w", {{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {0, 16}}}},
      {"h", {{"dtype", "F16"}, {"shape", {1}}, {"data_offsets", {16, 18}}}},
      {"b", {{"dtype", "BF16"}, {"shape", {1}}, {"data_offsets", {18, 20}}}}};
  std::map<std::string, std::string> metadata;
  auto tensors = ReadSafetensorsBytes(Safetensors(header, data), &metadata);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_TRUE(tensors->at("w").equal(torch::tensor({1.5f, -2.0f, 3.0f, 4.25f}).view({2, 2})));
  EXPECT_EQ(tensors->at("h").item<float>(), 1.0f);
  EXPECT_EQ(tensors->at("b").item<float>(), 2.0f);
  EXPECT_EQ(metadata.at("format"), "pt");
}

TEST(SafetensorsTest, EachDamageIsNamed) {
  const nlohmann::json good = {{"w", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}}};
  const std::string data = Floats({1.0f, 2.0f});
  const std::string whole = Safetensors(good, data);
  // Truncated anywhere: DATA_LOSS, never a crash.
  for (size_t keep : {size_t{0}, size_t{5}, size_t{20}, whole.size() - 1}) {
    auto cut = ReadSafetensorsBytes(whole.substr(0, keep));
    ASSERT_FALSE(cut.ok()) << keep;
    EXPECT_TRUE(cut.status().code() == absl::StatusCode::kDataLoss ||
                cut.status().code() == absl::StatusCode::kInvalidArgument)
        << cut.status();
  }
  EXPECT_EQ(ReadSafetensorsBytes(whole.substr(0, whole.size() - 1)).status().code(),
            absl::StatusCode::kDataLoss);
  struct Case {
    nlohmann::json entry;
    const char* says;
  };
  const Case cases[] = {
      {{{"dtype", "I64"}, {"shape", {1}}, {"data_offsets", {0, 8}}}, "dtype I64"},
      {{{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 8}}}, "needs 12 bytes"},
      {{{"dtype", "F32"}, {"shape", {-1}}, {"data_offsets", {0, 8}}}, "shape entry"},
      {{{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {8, 0}}}, "end before"},
      {{{"dtype", "F32"}, {"shape", {2}}}, "data_offsets"},
  };
  for (const Case& c : cases) {
    auto read = ReadSafetensorsBytes(Safetensors({{"bad.weight", c.entry}}, data));
    ASSERT_FALSE(read.ok()) << c.says;
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(read.status().message(), "bad.weight")) << read.status();
    EXPECT_TRUE(absl::StrContains(read.status().message(), c.says)) << read.status();
  }
}

// Runs Debian's PyTorch on `script` with the path as argv[1].
void Python(const std::string& script, const std::string& path) {
  const std::string command = "/usr/bin/python3 -c '" + script + "' " + path + " 2>/dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
}

TEST(TorchCheckpointTest, ReadsAStateDictOfEveryWeightDtype) {
  testing::ScopedTempDir dir("torch_checkpoint");
  const std::string path = dir.File("m.pth");
  Python(
      "import sys, torch, collections\n"
      "t = torch.arange(12.).view(3, 4)\n"
      "d = collections.OrderedDict([(\"f\", t), (\"h\", t.half()), (\"b\", t.bfloat16()),\n"
      "    (\"view\", t.t()[1:]), (\"d\", t.double()), (\"e\", torch.zeros(0, 3))])\n"
      "torch.save(d, sys.argv[1])",
      path);
  auto tensors = ReadTorchCheckpoint(path);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  const auto t = torch::arange(12, torch::kFloat).view({3, 4});
  for (const char* name : {"f", "h", "b", "d"}) EXPECT_TRUE(tensors->at(name).equal(t)) << name;
  EXPECT_TRUE(tensors->at("view").equal(t.t().narrow(0, 1, 3)));  // strides and offsets kept
  EXPECT_EQ(tensors->at("e").sizes(), (std::vector<int64_t>{0, 3}));
}

TEST(TorchCheckpointTest, APickleThatCallsAFunctionIsRefusedUnrun) {
  testing::ScopedTempDir dir("torch_checkpoint_call");
  const std::string path = dir.File("evil.pth"), marker = dir.File("ran");
  Python(
      "import sys, os, torch\n"
      "class Evil:\n"
      "    def __reduce__(self):\n"
      "        return (os.system, (\"touch " +
          marker +
          "\",))\n"
          "torch.save({\"w\": torch.ones(2), \"x\": Evil()}, sys.argv[1])",
      path);
  auto tensors = ReadTorchCheckpoint(path);
  ASSERT_FALSE(tensors.ok());
  EXPECT_EQ(tensors.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(tensors.status().message(), "system")) << tensors.status();
  EXPECT_FALSE(std::ifstream(marker).good()) << "the pickle ran";
}

TEST(TorchCheckpointTest, ADamagedArchiveIsDataLoss) {
  testing::ScopedTempDir dir("torch_checkpoint_damage");
  const std::string path = dir.File("m.pth");
  Python("import sys, torch\ntorch.save({\"w\": torch.ones(64)}, sys.argv[1])", path);
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(ReadTorchCheckpointBytes(bytes.substr(0, bytes.size() / 2)).status().code(),
            absl::StatusCode::kDataLoss);
  bytes[bytes.size() / 2] ^= 0x40;  // a bit flipped in a record
  EXPECT_EQ(ReadTorchCheckpointBytes(bytes).status().code(), absl::StatusCode::kDataLoss);
}

// A BlinkDL-layout RWKV-7 state dict of two layers, width 16, 2 heads.
TensorMap BlinkDlTensors() {
  const int64_t c = 16, heads = 2, n = 8, ff = 32, vocab = 40;
  TensorMap t;
  t["emb.weight"] = torch::randn({vocab, c});
  for (int64_t l = 0; l < 2; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    std::vector<std::string> norms = {"ln1", "ln2"};
    if (l == 0) norms.push_back("ln0");
    for (const auto& norm : norms) {
      t[b + norm + ".weight"] = torch::ones({c});
      t[b + norm + ".bias"] = torch::zeros({c});
    }
    for (const char* x :
         {"x_r", "x_w", "x_k", "x_v", "x_a", "x_g", "w0", "a0", "v0", "k_k", "k_a"}) {
      t[b + "att." + x] = torch::rand({1, 1, c});
    }
    for (const char* m : {"w", "a", "v", "g"}) {
      t[b + "att." + m + "1"] = torch::randn({c, 4});
      t[b + "att." + m + "2"] = torch::randn({4, c});
    }
    t[b + "att.r_k"] = torch::randn({heads, n});
    for (const char* p : {"receptance", "key", "value", "output"}) {
      t[b + "att." + p + ".weight"] = torch::randn({c, c});
    }
    t[b + "att.ln_x.weight"] = torch::ones({c});
    t[b + "att.ln_x.bias"] = torch::zeros({c});
    t[b + "ffn.x_k"] = torch::rand({1, 1, c});
    t[b + "ffn.key.weight"] = torch::randn({ff, c});
    t[b + "ffn.value.weight"] = torch::randn({c, ff});
  }
  t["ln_out.weight"] = torch::ones({c});
  t["ln_out.bias"] = torch::zeros({c});
  t["head.weight"] = torch::randn({vocab, c});
  return t;
}

TEST(Rwkv7CheckpointTest, SizesComeFromTheTensors) {
  auto model = ImportRwkv7(BlinkDlTensors(), Rwkv7Layout::kBlinkDl);
  ASSERT_TRUE(model.ok()) << model.status();
  const LmConfig& c = (*model)->config();
  EXPECT_EQ(c.d_model, 16);
  EXPECT_EQ(c.layers, 2);
  EXPECT_EQ(c.heads, 2);
  EXPECT_EQ(c.ff_hidden, 32);
  EXPECT_EQ(c.vocab_size, 40);
  EXPECT_EQ(c.rwkv7_ranks.decay, 4);
  EXPECT_FALSE(c.tie_embeddings);
}

TEST(Rwkv7CheckpointTest, EveryTensorThatDoesNotFitIsNamed) {
  {
    TensorMap t = BlinkDlTensors();
    t.erase("blocks.1.att.g2");
    auto model = ImportRwkv7(t, Rwkv7Layout::kBlinkDl);
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(model.status().message(), "missing tensor blocks.1.att.g2"))
        << model.status();
  }
  {
    TensorMap t = BlinkDlTensors();
    t["blocks.1.att.key.weight"] = torch::randn({16, 15});
    auto model = ImportRwkv7(t, Rwkv7Layout::kBlinkDl);
    EXPECT_TRUE(absl::StrContains(model.status().message(), "blocks.1.att.key.weight has shape"))
        << model.status();
  }
  {
    TensorMap t = BlinkDlTensors();
    t["blocks.1.att.extra"] = torch::randn({3});
    auto model = ImportRwkv7(t, Rwkv7Layout::kBlinkDl);
    EXPECT_TRUE(
        absl::StrContains(model.status().message(), "tensor blocks.1.att.extra is not part"))
        << model.status();
  }
  {
    TensorMap t = BlinkDlTensors();
    t.erase("emb.weight");
    EXPECT_TRUE(
        absl::StrContains(ImportRwkv7(t, Rwkv7Layout::kBlinkDl).status().message(), "emb.weight"));
  }
}

TEST(Rwkv7CheckpointTest, OtherGenerationsAreRefusedByName) {
  TensorMap v6 = {{"blocks.0.att.time_maa_x", torch::ones({1})},
                  {"blocks.0.att.time_faaaa", torch::ones({1})}};
  EXPECT_TRUE(absl::StrContains(CheckRwkvVersion(v6).message(), "RWKV-6"));
  TensorMap v4 = {{"blocks.0.att.time_first", torch::ones({1})}};
  EXPECT_TRUE(absl::StrContains(CheckRwkvVersion(v4).message(), "RWKV-4"));
  EXPECT_TRUE(CheckRwkvVersion(BlinkDlTensors()).ok());
  TensorMap other = {{"transformer.h.0.attn.c_attn.weight", torch::ones({1})}};
  EXPECT_TRUE(absl::StrContains(CheckRwkvVersion(other).message(), "not an RWKV checkpoint"));
}

TEST(Rwkv7CheckpointTest, HfConfigOptionsItCannotServeAreNamed) {
  EXPECT_TRUE(ParseRwkv7HfConfig(R"({"model_type": "rwkv7", "norm_eps": 1e-5})").ok());
  EXPECT_TRUE(absl::StrContains(
      ParseRwkv7HfConfig(R"({"model_type": "mamba2"})").status().message(), "model_type"));
  EXPECT_TRUE(absl::StrContains(
      ParseRwkv7HfConfig(R"({"model_type": "rwkv7", "attn": {"layers": [1]}})").status().message(),
      "attn"));
  EXPECT_TRUE(absl::StrContains(
      ParseRwkv7HfConfig(R"({"model_type": "rwkv7", "norm_eps": 1e-6})").status().message(),
      "norm_eps"));
  EXPECT_FALSE(ParseRwkv7HfConfig("[1, 2").ok());
}

// One table chooses the architecture by model_type; anything else is
// refused with what the table holds, never read as another architecture.
TEST(HfRegistryTest, ModelTypeChoosesTheArchitectureOrIsRefusedByName) {
  for (const HfArchitecture& entry : HfArchitectures()) {
    auto found = FindHfArchitecture(R"({"model_type": ")" + entry.model_type + R"("})");
    ASSERT_TRUE(found.ok()) << entry.model_type << ": " << found.status();
    EXPECT_EQ(*found, &entry);
    // An empty checkpoint is refused by every architecture, by name.
    std::string layout;
    EXPECT_FALSE(entry.import(R"({"model_type": ")" + entry.model_type + R"("})", {}, &layout).ok())
        << entry.model_type;
  }
  auto mamba_ssm = FindHfArchitecture(R"({"d_model": 64, "n_layer": 2, "ssm_cfg": {}})");
  ASSERT_TRUE(mamba_ssm.ok()) << mamba_ssm.status();
  EXPECT_EQ((*mamba_ssm)->model_type, "mamba2");
  for (const char* config : {R"({"model_type": "llama"})", R"({"hidden_size": 8})"}) {
    auto refused = FindHfArchitecture(config);
    ASSERT_FALSE(refused.ok()) << config;
    EXPECT_TRUE(absl::StartsWith(refused.status().message(), "config.json: model_type: "))
        << refused.status();
    for (const HfArchitecture& entry : HfArchitectures()) {
      EXPECT_TRUE(absl::StrContains(refused.status().message(), entry.model_type));
    }
  }
  EXPECT_FALSE(FindHfArchitecture(R"({"model_type": 7})").ok());
  EXPECT_FALSE(FindHfArchitecture("[1, 2").ok());
}

// LFM2-350M's published config.json shape: transformers derives its
// feed-forward width 4,608 from block_ff_dim 6,656 (2/3, then up to a
// multiple of 256), six attention layers among sixteen, 8 key/value heads.
TEST(Lfm2ConfigTest, PublishedShapeGivesTransformersSizes) {
  const std::string config = R"({"model_type": "lfm2", "architectures": ["Lfm2ForCausalLM"],
    "block_auto_adjust_ff_dim": true, "block_dim": 1024, "block_ff_dim": 6656,
    "block_ffn_dim_multiplier": 1.0, "block_multiple_of": 256, "block_norm_eps": 1e-05,
    "block_use_swiglu": true, "conv_L_cache": 3, "conv_bias": false, "conv_dim": 1024,
    "conv_dim_out": 1024, "hidden_size": 1024, "intermediate_size": 6656,
    "layer_types": ["conv", "conv", "full_attention", "conv", "conv", "full_attention", "conv",
                    "conv", "full_attention", "conv", "full_attention", "conv", "full_attention",
                    "conv", "full_attention", "conv"],
    "max_position_embeddings": 128000, "norm_eps": 1e-05, "num_attention_heads": 16,
    "num_heads": 16, "num_hidden_layers": 16, "num_key_value_heads": 8,
    "rope_theta": 1000000.0, "use_pos_enc": true, "vocab_size": 65536})";
  absl::StatusOr<LmConfig> c = ParseLfm2Config(config);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ff_hidden, 4608);
  EXPECT_EQ(c->attention_layers, (std::vector<int64_t>{2, 5, 8, 10, 12, 14}));
  EXPECT_EQ(c->kv_heads, 8);
  EXPECT_EQ(c->mixer, MixerKind::kShortConv);
  EXPECT_EQ(c->conv_kernel, 3);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_TRUE(c->tie_embeddings);
  EXPECT_EQ(c->max_context, kLfm2MaxContext);

  // LFM2-1.2B: 12,288 -> 8,192; full_attn_idxs in place of layer_types.
  nlohmann::json wide = nlohmann::json::parse(config);
  wide.erase("layer_types");
  wide["full_attn_idxs"] = {2, 5, 8, 10, 12, 14};
  for (const char* key : {"hidden_size", "block_dim", "conv_dim", "conv_dim_out"}) wide[key] = 2048;
  wide["block_ff_dim"] = 12288;
  wide["num_attention_heads"] = wide["num_heads"] = 32;
  c = ParseLfm2Config(wide.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ff_hidden, 8192);
  EXPECT_EQ(c->attention_layers.size(), 6u);
}

TEST(Lfm2ConfigTest, WhatIsNotBuiltIsRefusedByName) {
  const std::string base = R"({"model_type": "lfm2", "hidden_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 96})";
  ASSERT_TRUE(ParseLfm2Config(base).ok());
  for (const auto& [key, value, named] :
       std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
           {"conv_bias", true, "conv_bias"},
           {"block_use_swiglu", false, "block_use_swiglu"},
           {"rope_scaling", {{"type", "yarn"}}, "rope_scaling"},
           {"layer_types", {"conv", "mamba"}, "\"mamba\" at 1"},
           {"num_key_value_heads", 3, "kv_heads"},
           {"conv_dim", 32, "conv_dim"},
           {"block_ffn_dim_multiplier", 1e300, "block_ffn_dim_multiplier"},
           {"attention_window", 16, "attention_window: is not an LFM2 option"}}) {
    nlohmann::json config = nlohmann::json::parse(base);
    config[key] = value;
    absl::StatusOr<LmConfig> parsed = ParseLfm2Config(config.dump());
    if (parsed.ok()) parsed = parsed->Validate().ok() ? parsed : parsed->Validate();
    ASSERT_FALSE(parsed.ok()) << key;
    EXPECT_TRUE(absl::StrContains(parsed.status().message(), named)) << parsed.status();
  }
}

// granite-4.0-h-350m's config.json, as published.
TEST(GraniteConfigTest, PublishedShapeGivesTheHybrid) {
  const std::string config = R"({"architectures": ["GraniteMoeHybridForCausalLM"],
    "attention_bias": false, "attention_dropout": 0.0, "attention_multiplier": 0.015625,
    "bos_token_id": 100257, "embedding_multiplier": 12, "eos_token_id": 100257,
    "hidden_act": "silu", "hidden_size": 768, "initializer_range": 0.1,
    "intermediate_size": 2048, "logits_scaling": 3,
    "layer_types": ["mamba", "mamba", "mamba", "mamba", "mamba", "mamba", "mamba", "mamba",
      "mamba", "mamba", "attention", "mamba", "mamba", "attention", "mamba", "mamba", "mamba",
      "attention", "mamba", "mamba", "mamba", "mamba", "mamba", "mamba", "mamba", "mamba",
      "mamba", "attention", "mamba", "mamba", "mamba", "mamba"],
    "mamba_chunk_size": 256, "mamba_conv_bias": true, "mamba_d_conv": 4, "mamba_d_head": 32,
    "mamba_d_state": 128, "mamba_expand": 2, "mamba_n_groups": 1, "mamba_n_heads": 48,
    "mamba_proj_bias": false, "max_position_embeddings": 32768, "model_type": "granitemoehybrid",
    "num_attention_heads": 12, "num_experts_per_tok": 0, "num_hidden_layers": 32,
    "num_key_value_heads": 4, "num_local_experts": 0, "output_router_logits": false,
    "pad_token_id": 100256, "position_embedding_type": "nope", "residual_multiplier": 0.246,
    "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 10000,
    "router_aux_loss_coef": 0.01, "shared_intermediate_size": 2048, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "transformers_version": "4.56.0", "use_cache": true,
    "vocab_size": 100352})";
  absl::StatusOr<LmConfig> c = ParseGraniteConfig(config);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->mixer, MixerKind::kMamba2);
  EXPECT_TRUE(c->whole_block_ff);
  EXPECT_EQ(c->heads, 48);
  EXPECT_EQ(c->attention_heads, 12);
  EXPECT_EQ(c->kv_heads, 4);
  EXPECT_FALSE(c->rope);
  EXPECT_EQ(c->attention_layers, (std::vector<int64_t>{10, 13, 17, 27}));
  EXPECT_EQ(c->ff_hidden, 2048);
  EXPECT_EQ(c->mamba2.state_size, 128);
  EXPECT_TRUE(c->tie_embeddings);
  EXPECT_EQ(c->max_context, kGraniteMaxContext);
  c->vocab_size = 100352;
  EXPECT_TRUE(c->Validate().ok()) << c->Validate();
  EXPECT_EQ(c->moe.experts, 0);

  // granite-4.0-h-tiny's experts: 64 of width 512, six per token.
  nlohmann::json tiny = nlohmann::json::parse(config);
  tiny["num_local_experts"] = 64;
  tiny["num_experts_per_tok"] = 6;
  tiny["intermediate_size"] = 512;
  c = ParseGraniteConfig(tiny.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->moe.experts, 64);
  EXPECT_EQ(c->moe.top_k, 6);
  EXPECT_EQ(c->moe.hidden, 512);
}

TEST(GraniteConfigTest, WhatIsNotBuiltIsRefusedByName) {
  const std::string base = R"({"model_type": "granitemoehybrid", "hidden_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "shared_intermediate_size": 96,
    "num_local_experts": 0, "mamba_n_heads": 8, "mamba_d_state": 16,
    "layer_types": ["mamba", "attention"]})";
  ASSERT_TRUE(ParseGraniteConfig(base).ok()) << ParseGraniteConfig(base).status();
  for (const auto& [key, value, named] :
       std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
           {"num_local_experts", 64, "num_experts_per_tok: missing"},
           {"mamba_n_groups", 2, "mamba_n_groups"},
           {"mamba_proj_bias", true, "mamba_proj_bias"},
           {"attention_bias", true, "attention_bias"},
           {"hidden_act", "gelu", "hidden_act"},
           {"position_embedding_type", "alibi", "position_embedding_type"},
           {"rope_scaling", {{"type", "yarn"}}, "rope_scaling"},
           {"layer_types", {"mamba", "moe"}, "\"moe\" at 1"},
           {"mamba_d_head", 5, "mamba_d_head"},
           {"num_key_value_heads", 3, "kv_heads"},
           {"time_step_limit", {0.0, 5.0}, "time_step_limit"},
           {"logits_scaling", 0, "logits_scaling"},
           {"sliding_window", 16, "sliding_window: is not a Granite 4.0-H option"}}) {
    nlohmann::json config = nlohmann::json::parse(base);
    config[key] = value;
    absl::StatusOr<LmConfig> parsed = ParseGraniteConfig(config.dump());
    if (parsed.ok()) parsed = parsed->Validate().ok() ? parsed : parsed->Validate();
    if (parsed.ok() && key == "logits_scaling") {  // the multipliers are read at import
      parsed = ImportGranite(config.dump(), {}, nullptr).status();
    }
    ASSERT_FALSE(parsed.ok()) << key;
    EXPECT_TRUE(absl::StrContains(parsed.status().message(), named)) << parsed.status();
  }
}

}  // namespace
}  // namespace attn
