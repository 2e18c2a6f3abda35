// LoadPackage on archives that are intact zips but say the wrong things:
// fuzz_model_package mutates raw bytes, which the CRC check refuses before
// the loader's own logic runs; this target writes well-formed archives, as
// SavePackage would, from a tiny model whose contents the input edits:
//
//   the config (a field set to any integer, any JSON in place of "lm", or
//   the format-1 layout), the format version, each tensor (kept, dropped,
//   renamed, reshaped, given another dtype, or stored as an int8 package
//   stores a dense weight, with its scales right, edited or missing), an
//   extra tensor, and the tokenizer buffer (any bytes, another dtype, or
//   none).
//
// Every load must end OK or in kInvalidArgument naming the file (the archive
// itself is intact); a model that loads must run a forward pass.
#include <fuzzer/FuzzedDataProvider.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "model/lm/model_package.h"
#include "model/lm/torchscript_methods.h"
#include "tests/fuzz/scratch_file.h"

namespace {

const std::string& ScratchPath() {
  static const std::string path = attn::fuzzing::ScratchPath("fuzz_package_contents");
  return path;
}

attn::LmConfig BaseConfig(attn::MixerKind kind) {
  attn::LmConfig c;
  c.vocab_size = 24;
  c.d_model = 8;
  c.layers = 1;
  c.heads = 2;
  c.ff_hidden = 8;
  c.mixer = kind;
  c.window = 3;
  c.max_context = 12;
  if (attn::IsWholeBlock(kind)) {  // the blocks' own norms, no positions
    c.norm = attn::WholeBlockNorm(kind);
    c.positions = attn::PositionKind::kNone;
    c.rwkv7_ranks = {4, 4, 4, 4};
    c.mamba2 = {4, 3, 2, 1};
  }
  return c;
}

// One model per kind, built once: the fuzzer edits what is written, not
// the model.
const std::map<std::string, torch::Tensor>& BaseTensors(attn::MixerKind kind) {
  static std::map<attn::MixerKind, std::map<std::string, torch::Tensor>> cache;
  auto& tensors = cache[kind];
  if (tensors.empty()) {
    torch::manual_seed(1);
    attn::CausalLm model(BaseConfig(kind));
    for (const auto& p : model->named_parameters()) tensors[p.key()] = p.value().detach();
    for (const auto& b : model->named_buffers()) tensors[b.key()] = b.value().detach();
  }
  return tensors;
}

std::string ConfigText(FuzzedDataProvider& in, const attn::LmConfig& base, bool format_one) {
  std::string lm = base.ToJson();
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      break;
    case 1: {  // one numeric field set to any integer
      static const char* kFields[] = {"vocab_size", "d_model", "layers",      "heads",
                                      "ff_hidden",  "window",  "max_context", "chunk"};
      const std::string field = kFields[in.ConsumeIntegralInRange<size_t>(0, 7)];
      const std::string key = "\"" + field + "\": ";
      const size_t at = lm.find(key);
      if (at == std::string::npos) break;
      const size_t end = lm.find_first_of(",\n}", at + key.size());
      lm.replace(at + key.size(), end - at - key.size(),
                 std::to_string(in.ConsumeIntegral<int64_t>()));
      break;
    }
    default:
      lm = in.ConsumeRandomLengthString(256);
  }
  return format_one ? lm : "{\"lm\": " + lm + "}";
}

torch::Tensor Edited(FuzzedDataProvider& in, const torch::Tensor& tensor) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0: {  // another shape, up to three small dimensions
      std::vector<int64_t> shape(in.ConsumeIntegralInRange<size_t>(0, 3));
      for (auto& d : shape) d = in.ConsumeIntegralInRange<int64_t>(0, 40);
      return torch::zeros(shape);
    }
    case 1:
      return tensor.to(torch::kDouble);
    case 2:
      return tensor.to(torch::kLong);
    case 3:
      return tensor.to(torch::kBool);
    case 4:
      return tensor.flatten();
    case 5:
      return tensor.to(torch::kChar);
    default:
      return tensor;
  }
}

void CheckRuns(attn::CausalLm& model) {
  const int64_t vocab = model->config().vocab_size;
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = model->forward(torch::tensor({{int64_t{0}, vocab - 1}}));
  if (logits.dim() != 3 || logits.size(1) != 2 || logits.size(2) != vocab) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  torch::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const auto& kinds = attn::AllMixerKinds();
  const attn::MixerKind kind = kinds[in.ConsumeIntegralInRange<size_t>(0, kinds.size() - 1)];
  const bool format_one = in.ConsumeBool();
  torch::jit::Module archive("attn_model_package");
  for (const auto& [name, tensor] : BaseTensors(kind)) {
    const int action = in.ConsumeIntegralInRange<int>(0, 9);
    if (action == 0) continue;  // dropped
    std::string stored = format_one ? name : attn::ScriptTensorName(name);
    if (action == 1) stored += "_renamed";
    if (action == 3 && tensor.dim() == 2) {  // int8 values and scales, as format 3 stores them
      torch::Tensor scales = tensor.abs().amax(1).clamp_min(1e-8) / 127;
      archive.register_buffer(stored, (tensor / scales.unsqueeze(1)).round().to(torch::kChar));
      switch (in.ConsumeIntegralInRange<int>(0, 4)) {
        case 0:  // no scales
          continue;
        case 1:
          scales = Edited(in, scales);
          break;
        case 2:
          scales = scales.neg();
          break;
        case 3:
          scales = scales / 0.0;
          break;
        default:
          break;
      }
      archive.register_buffer(attn::Int8ScaleName(stored), scales);
      continue;
    }
    archive.register_buffer(stored, action == 2 ? Edited(in, tensor) : tensor);
  }
  if (in.ConsumeIntegralInRange<int>(0, 9) == 0) {
    archive.register_buffer("extra", torch::zeros({in.ConsumeIntegralInRange<int64_t>(0, 9)}));
  }
  const int tokenizer = in.ConsumeIntegralInRange<int>(0, 9);
  if (tokenizer > 0) {
    const std::string bytes = in.ConsumeRandomLengthString(64);
    auto buffer = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
    if (!bytes.empty()) std::memcpy(buffer.data_ptr(), bytes.data(), bytes.size());
    archive.register_buffer("tokenizer", tokenizer == 1 ? buffer.to(torch::kFloat) : buffer);
  }
  const std::string config = ConfigText(in, BaseConfig(kind), format_one);
  archive.register_attribute("config", c10::StringType::get(), config);
  const int64_t version = in.ConsumeBool()
                              ? (format_one ? 1 : in.ConsumeIntegralInRange<int64_t>(2, 3))
                              : in.ConsumeIntegral<int64_t>();
  archive.register_attribute("format_version", c10::IntType::get(), version);

  const std::string& path = ScratchPath();
  archive.save(path);
  absl::StatusOr<attn::ModelPackage> package = attn::LoadPackage(path);
  std::remove(path.c_str());
  if (package.ok()) {
    CheckRuns(package->model);
    return 0;
  }
  if (package.status().code() != absl::StatusCode::kInvalidArgument ||
      package.status().message().find(path) == std::string::npos) {
    __builtin_trap();
  }
  return 0;
}
