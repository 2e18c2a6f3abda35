#include "model/text/sentencepiece_backend.h"

#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>

namespace attn::spm {
namespace {

constexpr char kPluginName[] = "libattn_sentencepiece.so";

std::vector<std::string> Candidates() {
  std::vector<std::string> paths;
  if (const char* env = std::getenv("ATTN_SENTENCEPIECE_PLUGIN")) paths.push_back(env);
#ifdef ATTN_SENTENCEPIECE_PLUGIN_BUILD_PATH
  paths.push_back(ATTN_SENTENCEPIECE_PLUGIN_BUILD_PATH);
#endif
  std::error_code error;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    paths.push_back((exe.parent_path() / kPluginName).string());
    paths.push_back((exe.parent_path() / ".." / "lib" / kPluginName).string());
  }
  paths.push_back(kPluginName);  // the library search path
  return paths;
}

// glibc's own dlopen, not whatever the process interposes on the name.
// Sanitizer runtimes interpose dlopen and refuse RTLD_DEEPBIND outright,
// because a deep-bound library could bind malloc to libc's instead of the
// runtime's. That cannot happen to this plugin: built with the same
// sanitizer flags, it lists the runtime among its first dependencies, so its
// deep-bound scope finds the runtime's malloc and operator new before libc's
// and libstdc++'s (scripts/check/sanitize.sh runs every tokenizer and server test
// through it, and ASan checks every allocation is freed by its own kind).
// Without a sanitizer this is the same function as plain dlopen.
using DlopenFn = void* (*)(const char*, int);
DlopenFn LibcDlopen() {
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  void* real = libc ? dlsym(libc, "dlopen") : nullptr;
  return real ? reinterpret_cast<DlopenFn>(real) : &dlopen;
}

struct Loaded {
  const PluginApi* api = nullptr;
  std::string error;
};

Loaded LoadPlugin() {
  std::string tried;
  const DlopenFn open_library = LibcDlopen();
  for (const auto& path : Candidates()) {
    // DEEPBIND: the plugin and libsentencepiece bind to their own symbols
    // (its embedded protobuf) before the process's; LOCAL: theirs never
    // reach the global scope.
    void* handle = open_library(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!handle) {
      tried += "\n  " + path + ": " + dlerror();
      continue;
    }
    using Entry = const PluginApi* (*)();
    auto entry = reinterpret_cast<Entry>(dlsym(handle, "attn_sentencepiece_api"));
    if (!entry || entry()->version != kPluginApiVersion) {
      return {nullptr, path + " is not a compatible SentencePiece plugin"};
    }
    return {entry(), ""};
  }
  return {nullptr, std::string("cannot load the SentencePiece plugin ") + kPluginName +
                       " (set ATTN_SENTENCEPIECE_PLUGIN to its path); tried:" + tried};
}

}  // namespace

const PluginApi* Plugin(std::string* error) {
  static const Loaded* loaded = new Loaded(LoadPlugin());  // loaded once, never unloaded
  if (!loaded->api && error) *error = loaded->error;
  return loaded->api;
}

std::string Train(const TrainOptions& options, std::string* serialized_model) {
  std::string error;
  const PluginApi* api = Plugin(&error);
  return api ? api->train(options, serialized_model) : error;
}

Processor::~Processor() {
  if (handle_) api_->destroy(handle_);
}

Processor::Processor(Processor&& other) noexcept : api_(other.api_), handle_(other.handle_) {
  other.handle_ = nullptr;
}

Processor& Processor::operator=(Processor&& other) noexcept {
  if (this != &other) {
    if (handle_) api_->destroy(handle_);
    api_ = other.api_;
    handle_ = other.handle_;
    other.handle_ = nullptr;
  }
  return *this;
}

std::string Processor::Load(const std::string& serialized_model) {
  std::string error;
  api_ = Plugin(&error);
  if (!api_) return error;
  if (!handle_) handle_ = api_->create();
  return api_->load(handle_, serialized_model);
}

std::vector<int> Processor::Encode(const std::string& text) const {
  std::vector<int> ids;
  api_->encode(handle_, text, &ids);
  return ids;
}

std::string Processor::Decode(const std::vector<int>& ids) const {
  return api_->decode(handle_, ids);
}
int Processor::vocab_size() const { return api_->piece_size(handle_); }
int Processor::unk_id() const { return api_->special_id(handle_, 0); }
int Processor::bos_id() const { return api_->special_id(handle_, 1); }
int Processor::eos_id() const { return api_->special_id(handle_, 2); }
std::string Processor::Piece(int id) const { return api_->piece(handle_, id); }
int Processor::Kind(int id) const { return api_->kind(handle_, id); }
std::string Processor::Serialized() const { return api_->serialized(handle_); }

}  // namespace attn::spm
