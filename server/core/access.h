// Who may call the TextGeneration service, and how much each caller may run
// at once.
//
// API keys (--api_keys_file): one per line, either the key itself or
// "sha256:" and the 64 hex digits of its SHA-256, so that the file need not
// hold the secret; blank lines and lines starting with '#' are skipped.
// Clients send "authorization: Bearer <key>". A presented key is hashed and
// compared with every stored digest in constant time (the time depends
// neither on where a digest differs nor on which one matches). Keys are
// never logged, put in a status message or exported in a metric.
//
// The per-key limit (--max_requests_per_key) bounds the generation and
// scoring calls a key has running at once, so that one tenant cannot take
// every state slot; it applies only when keys are configured.
//
// Health checking and reflection are other services and stay open.
// Thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace attn::serving {

class Access {
 public:
  using Digest = std::array<uint8_t, 32>;

  // Anyone may call, without limits.
  Access() = default;
  // Parses a keys file's contents. kInvalidArgument naming the line (never
  // its contents) for a malformed "sha256:" line or a file without keys.
  // max_requests_per_key: 0 for no limit.
  static absl::StatusOr<std::unique_ptr<Access>> FromKeys(absl::string_view contents,
                                                          int64_t max_requests_per_key);
  // FromKeys of the file at `path`; kNotFound naming --api_keys_file if it
  // cannot be read.
  static absl::StatusOr<std::unique_ptr<Access>> FromFile(const std::string& path,
                                                          int64_t max_requests_per_key);

  // Admission of one call: held for as long as the call runs (the per-key
  // limit counts it until it is destroyed). Move-only.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept;
    Ticket& operator=(Ticket&& other) noexcept;
    ~Ticket();

   private:
    friend class Access;
    Ticket(const Access* access, int64_t key) : access_(access), key_(key) {}
    const Access* access_ = nullptr;
    int64_t key_ = -1;
  };

  // Checks the value of a call's "authorization" metadata (empty when it
  // has none): kUnauthenticated for a missing, malformed or unknown key.
  absl::Status Authenticate(absl::string_view authorization) const;
  // Authenticate, then takes one of the key's running calls:
  // kResourceExhausted naming the limit when it has them all.
  absl::StatusOr<Ticket> Admit(absl::string_view authorization) const;

  bool requires_keys() const { return !digests_.empty(); }
  int64_t max_requests_per_key() const { return max_requests_per_key_; }
  // The calls key `key` (its line's index among the keys) has running.
  int64_t running(int64_t key) const;

  static Digest Sha256(absl::string_view bytes);

 private:
  // The index of the key `authorization` presents, or a status.
  absl::StatusOr<int64_t> Find(absl::string_view authorization) const;
  void Release(int64_t key) const;

  std::vector<Digest> digests_;
  int64_t max_requests_per_key_ = 0;
  mutable absl::Mutex mu_;
  mutable std::vector<int64_t> running_ ABSL_GUARDED_BY(mu_);
};

}  // namespace attn::serving
