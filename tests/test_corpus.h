// Temporary directories and synthetic text for tests; no LibTorch.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace attn::testing {

// A fresh directory under the system's temporary directory, removed with the
// object. Names are unique per process and object, so parallel CTest runs
// (one process per test) never share one.
class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string& label) {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("attn_" + label + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~ScopedTempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Writes 3000 lines of eight words picked from `words` in a fixed pattern,
// each line ending with a number: a corpus with enough repeats for a small
// tokenizer and model to learn.
inline void WriteSyntheticCorpus(const std::string& path, const std::vector<std::string>& words) {
  std::ofstream out(path);
  const int n = static_cast<int>(words.size());
  for (int i = 0; i < 3000; ++i) {
    for (int w = 0; w < 8; ++w) out << words[(i * 7 + w * 5 + i / 17) % n] << ' ';
    out << i % 97 << ".\n";
  }
}

}  // namespace attn::testing
