// Internal to model/backend: the one place where exceptions from LibTorch
// (c10::Error) and from TorchScript programs (torch::jit::JITException, any
// std::exception) become statuses.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace attn::backend_internal {

// The message of an exception: a TorchScript program's error ends with the
// line that says what went wrong ("AssertionError: ..."), after a traceback
// of its source; the summary is that line.
inline std::string Summary(const std::string& what) {
  if (what.find("Traceback of TorchScript") == std::string::npos) return what;
  size_t end = what.find_last_not_of(" \n");
  if (end == std::string::npos) return what;
  const size_t start = what.rfind('\n', end);
  return what.substr(start == std::string::npos ? 0 : start + 1, end - start);
}

// Runs `fn`, turning whatever it throws into kInternal naming `what`.
template <typename Fn>
auto Guarded(const char* what, Fn&& fn) -> absl::StatusOr<decltype(fn())> {
  try {
    return fn();
  } catch (const c10::Error& error) {
    return absl::InternalError(absl::StrCat(what, " failed: ", error.what_without_backtrace()));
  } catch (const std::exception& error) {
    return absl::InternalError(absl::StrCat(what, " failed: ", Summary(error.what())));
  }
}

// Guarded() of a call that returns nothing.
template <typename Fn>
absl::Status GuardedCall(const char* what, Fn&& fn) {
  return Guarded(what,
                 [&] {
                   fn();
                   return true;
                 })
      .status();
}

}  // namespace attn::backend_internal
