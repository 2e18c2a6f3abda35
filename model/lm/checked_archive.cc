#include "model/lm/checked_archive.h"

#include <caffe2/serialize/in_memory_adapter.h>

#include <exception>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "util/hash64.h"
#include "util/zip_integrity.h"

namespace attn {

absl::StatusOr<CheckedArchive> LoadCheckedArchive(const std::string& path, torch::Device device,
                                                  absl::string_view what) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    return absl::NotFoundError(absl::StrCat(what, " ", path, " does not exist"));
  }
  absl::StatusOr<std::string> bytes = ReadIntactZip(path);
  if (!bytes.ok()) return absl::DataLossError(absl::StrCat(what, " ", bytes.status().message()));
  CheckedArchive archive;
  archive.file_hash = Hash64(*bytes);
  try {
    archive.module = torch::jit::load(
        std::make_shared<caffe2::serialize::MemoryReadAdapter>(bytes->data(), bytes->size()),
        device);
  } catch (const std::exception& e) {
    // Not only c10::Error: the archive's TorchScript source is parsed on
    // load, and a syntax error there is a std::runtime_error.
    const std::string message = e.what();
    return absl::DataLossError(absl::StrCat(what, " ", path,
                                            " is not a readable TorchScript archive (truncated or "
                                            "corrupt): ",
                                            message.substr(0, message.find('\n'))));
  }
  // swap, not assignment: assigning an empty string keeps the heap buffer.
  std::string().swap(*bytes);
  return archive;
}

}  // namespace attn
