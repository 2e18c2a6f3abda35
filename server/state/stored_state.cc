#include "server/state/stored_state.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace attn::serving {
namespace {

constexpr char kMagic[4] = {'A', 'T', 'S', 'S'};

template <typename T>
void Put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // the supported hosts are little-endian
  out.append(bytes, sizeof(T));
}

// Reads fixed-size values off the front of the bytes, bounded by them.
class Reader {
 public:
  explicit Reader(absl::string_view bytes) : bytes_(bytes) {}
  template <typename T>
  bool Get(T* value) {
    if (bytes_.size() - at_ < sizeof(T)) return false;
    std::memcpy(value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  size_t at() const { return at_; }
  size_t left() const { return bytes_.size() - at_; }

 private:
  absl::string_view bytes_;
  size_t at_ = 0;
};

absl::Status Damaged(const std::string& what) {
  return absl::DataLossError(absl::StrCat("stored state: ", what));
}

}  // namespace

std::string EncodeStoredState(uint64_t origin, absl::Span<const int64_t> tokens,
                              absl::string_view blob) {
  std::string out(kMagic, sizeof(kMagic));
  Put<uint32_t>(out, kStoredStateVersion);
  Put<uint64_t>(out, origin);
  Put<uint32_t>(out, static_cast<uint32_t>(tokens.size()));
  for (int64_t token : tokens) Put<int32_t>(out, static_cast<int32_t>(token));
  Put<uint64_t>(out, Hash64(out));
  out.append(blob.data(), blob.size());
  return out;
}

absl::StatusOr<StoredState> DecodeStoredState(absl::string_view bytes) {
  if (bytes.size() < sizeof(kMagic) || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return Damaged("no ATSS magic");
  }
  Reader in(bytes.substr(sizeof(kMagic)));
  StoredState state;
  uint32_t version = 0, count = 0;
  if (!in.Get(&version) || !in.Get(&state.origin) || !in.Get(&count)) {
    return Damaged("truncated header");
  }
  if (version != kStoredStateVersion) {
    return Damaged(absl::StrCat("version ", version, ", this server reads ", kStoredStateVersion));
  }
  if (in.left() / sizeof(int32_t) < count) {
    return Damaged(absl::StrCat(count, " tokens, more than the bytes hold"));
  }
  state.tokens.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    int32_t token = 0;
    in.Get(&token);
    state.tokens.push_back(token);
  }
  const size_t header = sizeof(kMagic) + in.at();
  uint64_t checksum = 0;
  if (!in.Get(&checksum)) return Damaged("truncated checksum");
  if (checksum != Hash64(bytes.substr(0, header))) return Damaged("checksum mismatch");
  state.blob = std::string(bytes.substr(header + sizeof(checksum)));
  return state;
}

absl::StatusOr<StateBlob> VerifyStoredState(absl::string_view bytes, uint64_t origin,
                                            absl::Span<const int64_t> tokens,
                                            const std::string& fingerprint) {
  absl::StatusOr<StoredState> stored = DecodeStoredState(bytes);
  if (!stored.ok()) return stored.status();
  if (stored->origin != origin) return Damaged("another origin");
  if (stored->tokens.size() != tokens.size() ||
      !std::equal(tokens.begin(), tokens.end(), stored->tokens.begin())) {
    return Damaged("other tokens");
  }
  absl::StatusOr<StateBlob> blob = DecodeStateBlob(stored->blob);
  if (!blob.ok()) return Damaged(std::string(blob.status().message()));
  if (blob->fingerprint != fingerprint) return Damaged("another model's state");
  if (blob->tokens != static_cast<int64_t>(tokens.size())) {
    return Damaged(absl::StrCat("a blob of ", blob->tokens, " tokens for ", tokens.size()));
  }
  return blob;
}

}  // namespace attn::serving
