// The API keys file parser and the authorization check on arbitrary bytes:
// the input up to its first NUL is a keys file, the rest an authorization
// value. Whatever they hold, a key the file lists must be admitted, and a
// refusal's message is one of the fixed ones (it never echoes a key).
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "server/core/access.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  const std::string keys = input.substr(0, split);
  const std::string header = split == std::string::npos ? "" : input.substr(split + 1);
  auto access = attn::serving::Access::FromKeys(keys, 2);
  if (!access.ok()) return 0;
  // A refusal says one of three fixed things, whatever was presented: no
  // part of a key can come back in it.
  const absl::Status status = (*access)->Authenticate(header);
  if (!status.ok()) {
    const std::string message(status.message());
    bool fixed = false;
    for (const char* known : {"", "Basic x", "Bearer \x01\x02 not a key"}) {
      fixed = fixed || (*access)->Authenticate(known).message() == message;
    }
    if (!fixed) __builtin_trap();
  }
  // Every plain key line is admitted.
  for (absl::string_view line : absl::StrSplit(keys, '\n')) {
    const std::string key(absl::StripAsciiWhitespace(line));
    if (key.empty() || key[0] == '#' || absl::StartsWith(key, "sha256:")) continue;
    if (!(*access)->Authenticate("Bearer " + key).ok()) __builtin_trap();
  }
  return 0;
}
