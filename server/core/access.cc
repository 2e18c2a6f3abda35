#include "server/core/access.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "util/files.h"

namespace attn::serving {
namespace {

constexpr absl::string_view kBearer = "Bearer ";
constexpr absl::string_view kSha256 = "sha256:";

absl::Status Unauthenticated(absl::string_view why) {
  return absl::UnauthenticatedError(
      absl::StrCat(why, "; send the metadata \"authorization: Bearer <API key>\""));
}

}  // namespace

Access::Digest Access::Sha256(absl::string_view bytes) {
  Digest digest;
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), digest.data());
  return digest;
}

absl::StatusOr<std::unique_ptr<Access>> Access::FromKeys(absl::string_view contents,
                                                         int64_t max_requests_per_key) {
  auto access = std::make_unique<Access>();
  access->max_requests_per_key_ = max_requests_per_key;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || absl::StartsWith(line, "#")) continue;
    if (absl::StartsWith(line, kSha256)) {
      const absl::string_view hex = line.substr(kSha256.size());
      const std::string bytes = absl::HexStringToBytes(hex);
      if (hex.size() != 64 || absl::BytesToHexString(bytes) != absl::AsciiStrToLower(hex)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--api_keys_file: line ", line_number,
                         " starts with sha256: but is not followed by "
                         "the 64 hex digits of a SHA-256 (sha256sum prints them)"));
      }
      Digest digest;
      std::copy(bytes.begin(), bytes.end(), digest.begin());
      access->digests_.push_back(digest);
    } else {
      access->digests_.push_back(Sha256(line));
    }
  }
  if (access->digests_.empty()) {
    return absl::InvalidArgumentError(
        "--api_keys_file: no keys in the file (one key, or sha256:<hex digest>, per line)");
  }
  absl::MutexLock lock(&access->mu_);
  access->running_.assign(access->digests_.size(), 0);
  return access;
}

absl::StatusOr<std::unique_ptr<Access>> Access::FromFile(const std::string& path,
                                                         int64_t max_requests_per_key) {
  absl::StatusOr<std::string> contents = ReadFileBytes(path, "--api_keys_file=");
  if (!contents.ok()) return contents.status();
  return FromKeys(*contents, max_requests_per_key);
}

absl::StatusOr<int64_t> Access::Find(absl::string_view authorization) const {
  if (authorization.empty()) return Unauthenticated("the call has no API key");
  if (!absl::StartsWith(authorization, kBearer)) {
    return Unauthenticated("the authorization metadata is not \"Bearer <API key>\"");
  }
  const Digest presented = Sha256(authorization.substr(kBearer.size()));
  // Every digest is compared, whichever matches: no early exit.
  int64_t found = -1;
  for (size_t i = 0; i < digests_.size(); ++i) {
    const bool match = CRYPTO_memcmp(presented.data(), digests_[i].data(), presented.size()) == 0;
    found = match ? static_cast<int64_t>(i) : found;
  }
  if (found < 0) return Unauthenticated("the API key is not valid");
  return found;
}

absl::Status Access::Authenticate(absl::string_view authorization) const {
  if (!requires_keys()) return absl::OkStatus();
  return Find(authorization).status();
}

absl::StatusOr<Access::Ticket> Access::Admit(absl::string_view authorization) const {
  if (!requires_keys()) return Ticket();
  absl::StatusOr<int64_t> key = Find(authorization);
  if (!key.ok()) return key.status();
  if (max_requests_per_key_ > 0) {
    absl::MutexLock lock(&mu_);
    if (running_[*key] >= max_requests_per_key_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "this API key has ", max_requests_per_key_,
          " requests running, its limit (--max_requests_per_key); wait for one to finish"));
    }
    ++running_[*key];
  }
  return Ticket(this, *key);
}

int64_t Access::running(int64_t key) const {
  absl::MutexLock lock(&mu_);
  return key >= 0 && key < static_cast<int64_t>(running_.size()) ? running_[key] : 0;
}

void Access::Release(int64_t key) const {
  if (max_requests_per_key_ <= 0) return;
  absl::MutexLock lock(&mu_);
  --running_[key];
}

Access::Ticket::Ticket(Ticket&& other) noexcept
    : access_(std::exchange(other.access_, nullptr)), key_(std::exchange(other.key_, -1)) {}

Access::Ticket& Access::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    if (access_ != nullptr) access_->Release(key_);
    access_ = std::exchange(other.access_, nullptr);
    key_ = std::exchange(other.key_, -1);
  }
  return *this;
}

Access::Ticket::~Ticket() {
  if (access_ != nullptr) access_->Release(key_);
}

}  // namespace attn::serving
