// What a request constrains its output to, and the process-wide cache of
// compiled constraints.
//
// Every kind becomes GBNF first (one compile path): a JSON Schema through
// json_schema.h, a regular expression through regex.h, a choice as the
// alternation of its literal strings, a client's GBNF as it is.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "model/grammar/grammar.h"
#include "nlohmann/json.hpp"

namespace attn::grammar {

struct OutputConstraint {
  enum class Kind { kNone, kJsonObject, kJsonSchema, kRegex, kChoice, kGrammar };
  Kind kind = Kind::kNone;
  nlohmann::ordered_json schema;     // kJsonSchema
  std::string text;                  // kRegex: the pattern; kGrammar: GBNF
  std::vector<std::string> choices;  // kChoice
  // A JSON grammar's whitespace (JsonSchemaOptions::max_whitespace).
  int max_whitespace = 20;

  static OutputConstraint JsonObject();
  static OutputConstraint JsonSchema(nlohmann::ordered_json schema);
  static OutputConstraint Regex(std::string pattern);
  static OutputConstraint Choice(std::vector<std::string> choices);
  static OutputConstraint Gbnf(std::string grammar);

  // What identifies the compiled grammar (the cache's key).
  std::string Key() const;
};

// The GBNF of `constraint`. kInvalidArgument; a schema's errors carry the
// keyword's path (".properties.age.minimum") as their field, a regex's and
// a grammar's the offset or line in the message.
absl::StatusOr<std::string> ConstraintGbnf(const OutputConstraint& constraint);

struct CompileInfo {
  bool cached = false;  // came from the cache
  double seconds = 0;   // compile time (0 when cached)
};

// Hears of every Get (metrics); called outside the cache's lock.
class GrammarCacheObserver {
 public:
  virtual ~GrammarCacheObserver() = default;
  virtual void OnGet(const CompileInfo& info) = 0;
};

// Compiled grammars by constraint, least recently used dropped first.
class GrammarCache {
 public:
  explicit GrammarCache(size_t capacity) : capacity_(capacity) {}
  // The one cache every request of the process shares.
  static GrammarCache& Shared();
  // Not owned; must outlive the cache's use (null: none). ClearObserver
  // removes `observer` unless another has replaced it.
  void SetObserver(GrammarCacheObserver* observer) { observer_ = observer; }
  void ClearObserver(GrammarCacheObserver* observer) {
    observer_.compare_exchange_strong(observer, nullptr);
  }

  absl::StatusOr<std::shared_ptr<const Grammar>> Get(const OutputConstraint& constraint,
                                                     CompileInfo* info = nullptr);
  size_t size() const;

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const Grammar>>;
  const size_t capacity_;
  std::atomic<GrammarCacheObserver*> observer_{nullptr};
  mutable absl::Mutex mu_;
  std::list<Entry> order_ ABSL_GUARDED_BY(mu_);  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_ ABSL_GUARDED_BY(mu_);
};

}  // namespace attn::grammar
