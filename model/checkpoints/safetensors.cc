#include "model/checkpoints/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "util/files.h"

namespace attn {
namespace {

using Json = nlohmann::json;

// Headers of real checkpoints are kilobytes; a larger one is not a header.
constexpr uint64_t kMaxHeader = uint64_t{100} << 20;

bool Dtype(const std::string& name, torch::ScalarType* dtype) {
  if (name == "F32")
    *dtype = torch::kFloat;
  else if (name == "F16")
    *dtype = torch::kHalf;
  else if (name == "BF16")
    *dtype = torch::kBFloat16;
  else
    return false;
  return true;
}

template <typename... Parts>
absl::Status BadTensor(const std::string& name, const Parts&... what) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor ", name, ": ", what...));
}

// One header entry's tensor, read from `data` (the bytes after the header).
absl::StatusOr<torch::Tensor> ReadTensor(const std::string& name, const Json& entry,
                                         absl::string_view data) {
  if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() ||
      !entry.contains("shape") || !entry["shape"].is_array() || !entry.contains("data_offsets") ||
      !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2) {
    return BadTensor(name, "needs dtype, shape and data_offsets [begin, end]");
  }
  torch::ScalarType dtype;
  const std::string dtype_name = entry["dtype"].get<std::string>();
  if (!Dtype(dtype_name, &dtype)) {
    return BadTensor(name, "dtype ", dtype_name, "; weights must be F32, F16 or BF16");
  }
  std::vector<int64_t> shape;
  uint64_t elements = 1;
  for (const Json& size : entry["shape"]) {
    if (!size.is_number_unsigned() || size.get<uint64_t>() > (uint64_t{1} << 40)) {
      return BadTensor(name, "a shape entry that is not a size: ", size.dump());
    }
    shape.push_back(size.get<int64_t>());
    elements *= size.get<uint64_t>();
    if (elements > (uint64_t{1} << 40)) return BadTensor(name, "more than 2^40 elements");
  }
  const Json& offsets = entry["data_offsets"];
  if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
    return BadTensor(name, "data_offsets must be two byte offsets");
  }
  const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
  if (begin > end) return BadTensor(name, "data_offsets end before they begin");
  if (end > data.size()) {
    return absl::DataLossError(absl::StrCat("safetensors: tensor ", name, " ends at byte ", end,
                                            " of the data, which has ", data.size(),
                                            ": the file is truncated"));
  }
  const uint64_t bytes = elements * c10::elementSize(dtype);
  if (end - begin != bytes) {
    return BadTensor(name, "shape ", entry["shape"].dump(), " of ", dtype_name, " needs ", bytes,
                     " bytes, data_offsets give ", end - begin);
  }
  auto raw = torch::empty({static_cast<int64_t>(elements)}, torch::TensorOptions().dtype(dtype));
  if (bytes > 0) std::memcpy(raw.data_ptr(), data.data() + begin, bytes);
  return raw.to(torch::kFloat).view(shape);
}

// A read-only mapping of a file, unmapped when it goes.
class MappedFile {
 public:
  ~MappedFile() {
    if (data_ != nullptr && data_ != MAP_FAILED) munmap(data_, size_);
  }
  absl::Status Open(const std::string& path) {
    const int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot be opened"));
    struct stat info;
    if (fstat(fd, &info) != 0) {
      close(fd);
      return absl::DataLossError(absl::StrCat(path, ": cannot be read"));
    }
    size_ = static_cast<size_t>(info.st_size);
    data_ = size_ > 0 ? mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0) : nullptr;
    close(fd);
    if (data_ == MAP_FAILED) return absl::DataLossError(absl::StrCat(path, ": cannot be mapped"));
    return absl::OkStatus();
  }
  absl::string_view view() const {
    return data_ ? absl::string_view(static_cast<const char*>(data_), size_) : absl::string_view();
  }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace

absl::StatusOr<TensorMap> ReadSafetensorsBytes(absl::string_view bytes,
                                               std::map<std::string, std::string>* metadata) {
  if (bytes.size() < 8) {
    return absl::DataLossError("safetensors: shorter than its 8-byte header length");
  }
  uint64_t header = 0;
  for (int i = 0; i < 8; ++i) header |= uint64_t{static_cast<uint8_t>(bytes[i])} << (8 * i);
  if (header > kMaxHeader) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: a header of ", header, " bytes; not a safetensors file"));
  }
  if (header > bytes.size() - 8) {
    return absl::DataLossError(absl::StrCat("safetensors: the header says ", header,
                                            " bytes, the file has ", bytes.size() - 8,
                                            " after it: the file is truncated"));
  }
  const Json json = Json::parse(bytes.substr(8, header), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError("safetensors: the header is not a JSON object");
  }
  const absl::string_view data = bytes.substr(8 + header);
  TensorMap tensors;
  for (const auto& item : json.items()) {
    if (item.key() == "__metadata__") {
      if (metadata != nullptr && item.value().is_object()) {
        for (const auto& m : item.value().items()) {
          if (m.value().is_string()) (*metadata)[m.key()] = m.value().get<std::string>();
        }
      }
      continue;
    }
    absl::StatusOr<torch::Tensor> tensor = ReadTensor(item.key(), item.value(), data);
    if (!tensor.ok()) return tensor.status();
    tensors[item.key()] = *std::move(tensor);
  }
  return tensors;
}

absl::StatusOr<TensorMap> ReadSafetensors(const std::string& path) {
  MappedFile file;
  if (absl::Status opened = file.Open(path); !opened.ok()) return opened;
  absl::StatusOr<TensorMap> tensors = ReadSafetensorsBytes(file.view());
  if (!tensors.ok()) {
    return absl::Status(tensors.status().code(),
                        absl::StrCat(path, ": ", tensors.status().message()));
  }
  return tensors;
}

absl::StatusOr<TensorMap> ReadShardedSafetensors(const std::string& index_path) {
  absl::StatusOr<std::string> text = ReadFileBytes(index_path);
  if (!text.ok()) return text.status();
  const Json index = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
      !index["weight_map"].is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": not an index (a JSON object with a weight_map)"));
  }
  std::map<std::string, std::set<std::string>> shards;  // file -> tensors the map puts there
  for (const auto& item : index["weight_map"].items()) {
    const std::string file = item.value().is_string() ? item.value().get<std::string>() : "";
    if (file.empty() || file.find('/') != std::string::npos || file[0] == '.') {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map: ", item.key(),
                                                     " names no shard file in the directory"));
    }
    shards[file].insert(item.key());
  }
  const std::filesystem::path dir = std::filesystem::path(index_path).parent_path();
  TensorMap all;
  for (const auto& [file, names] : shards) {
    absl::StatusOr<TensorMap> shard = ReadSafetensors((dir / file).string());
    if (!shard.ok()) return shard.status();
    for (auto& [name, tensor] : *shard) {
      if (!names.count(name)) {
        return absl::InvalidArgumentError(absl::StrCat(file, " holds tensor ", name, ", which ",
                                                       index_path, " does not place there"));
      }
      all[name] = std::move(tensor);
    }
    for (const std::string& name : names) {
      if (!all.count(name)) {
        return absl::InvalidArgumentError(
            absl::StrCat(index_path, " places tensor ", name, " in ", file, ", which lacks it"));
      }
    }
  }
  return all;
}

}  // namespace attn
