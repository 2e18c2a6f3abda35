#include "server/state/initial_states.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "model/backend/backend.h"
#include "server/state/state_blob.h"
#include "util/files.h"

namespace attn::serving {

absl::Status ParseInitialStatesFlag(
    const std::string& flag, std::map<std::string, std::map<std::string, std::string>>* out) {
  for (absl::string_view entry : absl::StrSplit(flag, ',', absl::SkipWhitespace())) {
    const size_t colon = entry.find(':'), equals = entry.find('=');
    if (colon == absl::string_view::npos || equals == absl::string_view::npos || colon == 0 ||
        equals <= colon + 1 || equals + 1 == entry.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--initial_states: \"", entry, "\" is not MODEL:NAME=FILE"));
    }
    const std::string model(entry.substr(0, colon));
    const std::string name(entry.substr(colon + 1, equals - colon - 1));
    if (!(*out)[model].emplace(name, std::string(entry.substr(equals + 1))).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--initial_states: ", model, ":", name, " is given twice"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<InitialStates> LoadInitialStates(const std::string& model, LmBackend& backend,
                                                const std::map<std::string, std::string>& files) {
  InitialStates states;
  for (const auto& [name, file] : files) {
    absl::StatusOr<SavedRow> row = backend.ReadInitialState(file);
    if (absl::IsFailedPrecondition(row.status())) {
      return absl::InvalidArgumentError(
          absl::StrCat("--initial_states: ", model,
                       " is not an rwkv7 model on the native backend; only those "
                       "take initial states"));
    }
    if (!row.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--initial_states: ", model, ":", name, ": ", row.status().message()));
    }
    auto saved = std::make_shared<SavedRow>(*std::move(row));
    absl::StatusOr<std::string> bytes = ReadFileBytes(file);
    if (!bytes.ok()) return bytes.status();
    states[name] = {std::move(saved), Hash64(*bytes, /*seed=*/1)};
  }
  return states;
}

}  // namespace attn::serving
