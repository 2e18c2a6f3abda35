#include "model/lm/model_package.h"

#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "absl/strings/str_cat.h"
#include "model/layers/dense.h"
#include "tests/test_util.h"
#include "tests/tiny_model.h"
#include "util/files.h"
#include "util/hash64.h"

namespace attn {
namespace {

namespace fs = std::filesystem;

LmConfig SmallConfig(MixerKind kind) {
  LmConfig c = testing::SmallLmConfig(kind, 40);
  c.positions = PositionKind::kLearned;
  return c;
}

class ModelPackageTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return dir_.File(name); }

  // Saves a model and returns its path; `model` receives the saved model.
  std::string SaveModel(MixerKind kind, CausalLm* model,
                        const std::string& tokenizer = testing::TinyTokenizer().Serialized()) {
    torch::manual_seed(81);
    *model = CausalLm(SmallConfig(kind));
    testing::RandomizePositionParameters(**model, 0.3);
    const std::string path = Path(MixerKindName(kind) + ".pt");
    EXPECT_TRUE(SavePackage(path, *model, tokenizer).ok());
    return path;
  }

  testing::ScopedTempDir dir_{"package_test"};
};

TEST_F(ModelPackageTest, LoadReproducesLogitsExactly) {
  const std::string tokenizer = testing::TinyTokenizer().Serialized();  // binary bytes
  for (auto kind : {MixerKind::kAftConv, MixerKind::kMhaAlibi, MixerKind::kRelative}) {
    CausalLm saved{nullptr};
    const auto path = SaveModel(kind, &saved, tokenizer);
    auto loaded = LoadPackage(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    saved->eval();
    torch::NoGradGuard no_grad;
    auto tokens = torch::randint(0, 40, {2, 30}, torch::kLong);
    EXPECT_TRUE(loaded->model->forward(tokens).equal(saved->forward(tokens))) << path;
    EXPECT_EQ(loaded->tokenizer_model, tokenizer);
    EXPECT_EQ(loaded->model->config().ToJson(), saved->config().ToJson());
    // The server's model fingerprint, hashed from the bytes the load read.
    EXPECT_EQ(loaded->file_hash, Hash64(*ReadFileBytes(path))) << path;
  }
}

TEST_F(ModelPackageTest, MissingFileIsNotFound) {
  auto loaded = LoadPackage(Path("absent.pt"));
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(loaded.status().message()).find("absent.pt"), std::string::npos);
}

TEST_F(ModelPackageTest, TruncatedOrCorruptFileIsDataLoss) {
  CausalLm model{nullptr};
  const auto path = SaveModel(MixerKind::kAftSimple, &model);
  const auto size = fs::file_size(path);
  fs::copy_file(path, Path("truncated.pt"));
  fs::resize_file(Path("truncated.pt"), size / 2);
  {
    std::ofstream garbage(Path("garbage.pt"), std::ios::binary);
    for (int i = 0; i < 5000; ++i) garbage.put(static_cast<char>((i * 7919) % 251));
  }
  for (const auto& name : {"truncated.pt", "garbage.pt"}) {
    auto loaded = LoadPackage(Path(name));
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss) << name;
    EXPECT_NE(std::string(loaded.status().message()).find(name), std::string::npos)
        << loaded.status();
  }
}

// Rewrites one attribute of a saved package, as a stale or hand-edited file would.
void Rewrite(const std::string& path, const std::function<void(torch::jit::Module&)>& edit) {
  auto archive = torch::jit::load(path);
  edit(archive);
  archive.save(path);
}

TEST_F(ModelPackageTest, ConfigAndWeightsThatDisagreeAreNamed) {
  CausalLm model{nullptr};
  const auto path = SaveModel(MixerKind::kAftConv, &model);
  auto wider = SmallConfig(MixerKind::kAftConv);
  wider.ff_hidden = 64;
  Rewrite(path, [&](torch::jit::Module& m) {
    m.setattr("config", absl::StrCat("{\"lm\": ", wider.ToJson(), "}"));
  });
  auto loaded = LoadPackage(path);
  ASSERT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(loaded.status().message());
  EXPECT_NE(message.find("tensor layers.0.ff.down.weight has shape [32, 48], the config needs "
                         "[32, 64]"),
            std::string::npos)
      << message;
}

TEST_F(ModelPackageTest, OtherInconsistenciesAreNamed) {
  struct Case {
    std::function<void(torch::jit::Module&)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](auto& m) { m.setattr("format_version", int64_t{99}); }, "format version 99"},
      {[](auto& m) { m.setattr("config", std::string("{\"lm\": {\"d_model\": 32}}")); },
       "config: vocab_size: missing"},
      {[](auto& m) { m.setattr("config", std::string("{\"vocab_size\": 32}")); },
       "serve it with --backend=torchscript"},
      {[](auto& m) { m.register_buffer("extra_weight", torch::zeros({2})); },
       "tensor extra_weight is not part of a model"},
  };
  for (const auto& c : cases) {
    CausalLm model{nullptr};
    const auto path = SaveModel(MixerKind::kAftLocal, &model);
    Rewrite(path, c.edit);
    auto loaded = LoadPackage(path);
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(std::string(loaded.status().message()).find(c.message), std::string::npos)
        << loaded.status();
  }
}

// LibTorch's reader checks no CRC: without the package's own check, a
// flipped bit in a weight loads as a different model.
TEST_F(ModelPackageTest, AChangedWeightByteIsDataLossNotADifferentModel) {
  CausalLm model{nullptr};
  const auto path = SaveModel(MixerKind::kAftConv, &model);
  std::string bytes = ReadFileBytes(path).value();
  const torch::Tensor embedding = model->named_parameters()["embedding.weight"].contiguous();
  const std::string first_weights(static_cast<const char*>(embedding.data_ptr()), 64);
  const size_t at = bytes.find(first_weights);
  ASSERT_NE(at, std::string::npos);
  bytes[at + 1] ^= 0x01;  // a low mantissa bit of the first weight
  const std::string damaged = Path("damaged.pt");
  std::ofstream(damaged, std::ios::binary) << bytes;

  EXPECT_NO_THROW(torch::jit::load(damaged));  // LibTorch alone accepts it
  auto loaded = LoadPackage(damaged);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  const std::string message(loaded.status().message());
  EXPECT_NE(message.find("damaged.pt"), std::string::npos) << message;
  EXPECT_NE(message.find("CRC-32 mismatch"), std::string::npos) << message;
}

// A config may claim any size; the archive's tensors bound what is built.
TEST_F(ModelPackageTest, AConfigClaimingAHugeModelIsRefusedBeforeBuildingIt) {
  for (auto edit : std::vector<std::function<void(LmConfig&)>>{
           [](LmConfig& c) { c.vocab_size = int64_t{1} << 40; },
           [](LmConfig& c) { c.d_model = c.heads << 30; },
           [](LmConfig& c) { c.layers = int64_t{1} << 50; },
           [](LmConfig& c) { c.max_context = int64_t{1} << 40; },  // learned positions
       }) {
    CausalLm model{nullptr};
    const auto path = SaveModel(MixerKind::kAftConv, &model);
    LmConfig huge = SmallConfig(MixerKind::kAftConv);
    edit(huge);
    Rewrite(path, [&](torch::jit::Module& m) {
      m.setattr("config", absl::StrCat("{\"lm\": ", huge.ToJson(), "}"));
    });
    auto loaded = LoadPackage(path);
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << huge.ToJson();
    EXPECT_NE(std::string(loaded.status().message()).find("config describes a model of at least"),
              std::string::npos)
        << loaded.status();
  }
}

// The bound never refuses a real model: it is at most what every kind holds.
TEST(MinimumTensorElements, IsALowerBoundForEveryKind) {
  for (MixerKind kind : AllMixerKinds()) {
    for (auto positions : {PositionKind::kNone, PositionKind::kLearned}) {
      if (IsWholeBlock(kind) && positions != PositionKind::kNone) continue;  // none allowed
      LmConfig config = testing::SmallLmConfig(kind, 40);
      config.positions = positions;
      CausalLm model(config);
      int64_t held = 0;
      for (const auto& p : model->named_parameters()) held += p.value().numel();
      for (const auto& b : model->named_buffers()) held += b.value().numel();
      const double bound = MinimumTensorElements(config);
      EXPECT_LE(bound, static_cast<double>(held)) << MixerKindName(kind);
      // and it is not vacuous: the dense matrices are most of a model
      EXPECT_GE(bound, 0.5 * static_cast<double>(held)) << MixerKindName(kind);
    }
  }
}

int64_t FormatVersion(const std::string& path) {
  return torch::jit::load(path).attr("format_version").toInt();
}

// An int8 model saves its int8 values and scales, not its float weights, and
// loads back to the same int8 copies and dequantised weights, bit for bit.
TEST_F(ModelPackageTest, Int8PackagesHoldTheInt8WeightsAndLoadThemExactly) {
  for (auto kind : {MixerKind::kAftDecay, MixerKind::kMhaAlibi, MixerKind::kRelative}) {
    CausalLm model{nullptr};
    const auto float_path = SaveModel(kind, &model);
    const int64_t float_weight_bytes = model->dense_weight_bytes();
    ASSERT_TRUE(QuantizeInt8(model).ok());
    const std::string int8_path = Path(MixerKindName(kind) + "-int8.pt");
    ASSERT_TRUE(SavePackage(int8_path, model, testing::TinyTokenizer().Serialized()).ok());
    EXPECT_EQ(FormatVersion(float_path), kFloatPackageFormatVersion);
    EXPECT_EQ(FormatVersion(int8_path), kInt8PackageFormatVersion);
    // Three of every four weight bytes are gone (less the scales).
    EXPECT_LT(fs::file_size(int8_path) + float_weight_bytes / 2, fs::file_size(float_path))
        << MixerKindName(kind);

    auto loaded = LoadPackage(int8_path);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_TRUE(loaded->model->has_int8_weights());
    auto saved = model->named_parameters();
    int64_t int8_weights = 0;
    for (const auto& p : loaded->model->named_parameters()) {
      EXPECT_TRUE(p.value().equal(saved[p.key()])) << p.key();
      auto original = Int8CopyOf(saved[p.key()]), copy = Int8CopyOf(p.value());
      ASSERT_EQ(original.has_value(), copy.has_value()) << p.key();
      if (!copy) continue;
      ++int8_weights;
      EXPECT_TRUE(copy->values.equal(original->values)) << p.key();
      EXPECT_TRUE(copy->scales.equal(original->scales)) << p.key();
    }
    EXPECT_GE(int8_weights, 9) << "embedding and two layers' projections and feed-forward";
    torch::NoGradGuard no_grad;
    model->eval();
    // 5 rows multiply the int8 copies, 60 the dequantised float weights.
    for (auto shape : {std::vector<int64_t>{1, 5}, std::vector<int64_t>{2, 30}}) {
      auto tokens = torch::randint(0, 40, shape, torch::kLong);
      EXPECT_TRUE(loaded->model->forward(tokens).equal(model->forward(tokens)))
          << MixerKindName(kind) << " " << shape[1];
    }
    // Quantising the loaded model again keeps its int8 weights.
    const auto before = Int8CopyOf(loaded->model->named_parameters()["layers.0.ff.up.weight"]);
    ASSERT_TRUE(QuantizeInt8(loaded->model).ok());
    const auto after = Int8CopyOf(loaded->model->named_parameters()["layers.0.ff.up.weight"]);
    EXPECT_TRUE(after->values.equal(before->values) && after->scales.equal(before->scales));
  }
}

TEST_F(ModelPackageTest, DamagedInt8TensorsAreNamed) {
  struct Case {
    std::function<void(torch::jit::Module&)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](auto& m) { m.setattr("format_version", kFloatPackageFormatVersion); },
       "tensor embedding.weight is int8, which only format 3 stores"},
      {[](auto& m) { m.setattr("layers_0_ff_up_bias", torch::zeros({48}, torch::kChar)); },
       "tensor layers.0.ff.up.bias is int8; only the dense weights may be"},
      {[](auto& m) { m.setattr("layers_0_ff_up_weight_int8_scale", torch::ones({3})); },
       "scales layers_0_ff_up_weight_int8_scale must be 48 finite, non-negative float32 values"},
      {[](auto& m) { m.setattr("layers_0_ff_up_weight_int8_scale", torch::full({48}, NAN)); },
       "must be 48 finite"},
      {[](auto& m) { m.setattr("layers_0_ff_up_weight_int8_scale", -torch::ones({48})); },
       "non-negative"},
  };
  for (const auto& c : cases) {
    CausalLm model{nullptr};
    SaveModel(MixerKind::kAftConv, &model);
    ASSERT_TRUE(QuantizeInt8(model).ok());
    const std::string path = Path("damaged-int8.pt");
    ASSERT_TRUE(SavePackage(path, model, testing::TinyTokenizer().Serialized()).ok());
    Rewrite(path, c.edit);
    auto loaded = LoadPackage(path);
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(std::string(loaded.status().message()).find(c.message), std::string::npos)
        << loaded.status();
  }
  // An int8 weight without its scales: a float package with one weight
  // replaced.
  CausalLm model{nullptr};
  const auto path = SaveModel(MixerKind::kAftConv, &model);
  Rewrite(path, [](torch::jit::Module& m) {
    m.setattr("format_version", kInt8PackageFormatVersion);
    m.setattr("layers_1_mixer_out_proj_weight", torch::zeros({32, 32}, torch::kChar));
  });
  auto loaded = LoadPackage(path);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(loaded.status().message())
                .find("int8 tensor layers.1.mixer.out_proj.weight has no scales "
                      "(layers_1_mixer_out_proj_weight_int8_scale)"),
            std::string::npos)
      << loaded.status();
}

// Format 1, as packages were written before the TorchScript methods: the
// tensors under their C++ names and the LmConfig alone as config.
TEST_F(ModelPackageTest, FormatOnePackagesStillLoad) {
  torch::manual_seed(3);
  CausalLm model(SmallConfig(MixerKind::kLinearElu));
  model->eval();
  const std::string path = Path("format1.pt");
  torch::jit::Module archive("attn_model_package");
  for (const auto& p : model->named_parameters()) archive.register_buffer(p.key(), p.value());
  const std::string tokenizer = testing::TinyTokenizer().Serialized();
  auto bytes = torch::empty({static_cast<int64_t>(tokenizer.size())}, torch::kUInt8);
  std::memcpy(bytes.data_ptr<uint8_t>(), tokenizer.data(), tokenizer.size());
  archive.register_buffer("tokenizer", bytes);
  archive.register_attribute("config", c10::StringType::get(), model->config().ToJson());
  archive.register_attribute("format_version", c10::IntType::get(), int64_t{1});
  archive.save(path);
  auto loaded = LoadPackage(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  torch::NoGradGuard no_grad;
  auto tokens = torch::randint(0, 40, {1, 12}, torch::kLong);
  EXPECT_TRUE(loaded->model->forward(tokens).equal(model->forward(tokens)));
  EXPECT_EQ(loaded->tokenizer_model, tokenizer);
}

}  // namespace
}  // namespace attn
