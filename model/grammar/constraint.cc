#include "model/grammar/constraint.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/grammar/json_schema.h"
#include "model/grammar/regex.h"

namespace attn::grammar {

OutputConstraint OutputConstraint::JsonObject() {
  OutputConstraint c;
  c.kind = Kind::kJsonObject;
  return c;
}

OutputConstraint OutputConstraint::JsonSchema(nlohmann::ordered_json schema) {
  OutputConstraint c;
  c.kind = Kind::kJsonSchema;
  c.schema = std::move(schema);
  return c;
}

OutputConstraint OutputConstraint::Regex(std::string pattern) {
  OutputConstraint c;
  c.kind = Kind::kRegex;
  c.text = std::move(pattern);
  return c;
}

OutputConstraint OutputConstraint::Choice(std::vector<std::string> choices) {
  OutputConstraint c;
  c.kind = Kind::kChoice;
  c.choices = std::move(choices);
  return c;
}

OutputConstraint OutputConstraint::Gbnf(std::string grammar) {
  OutputConstraint c;
  c.kind = Kind::kGrammar;
  c.text = std::move(grammar);
  return c;
}

std::string OutputConstraint::Key() const {
  std::string key = absl::StrCat(static_cast<int>(kind), "/", max_whitespace, "/");
  switch (kind) {
    case Kind::kJsonSchema:
      return absl::StrCat(key, schema.dump());
    case Kind::kChoice:
      // Length-prefixed bytes rather than JSON: a choice may hold invalid
      // UTF-8 (proto2 text reaches validation as sent), which JSON cannot
      // carry exactly.
      for (const std::string& choice : choices) absl::StrAppend(&key, choice.size(), ":", choice);
      return key;
    default:
      return absl::StrCat(key, text);
  }
}

absl::StatusOr<std::string> ConstraintGbnf(const OutputConstraint& c) {
  JsonSchemaOptions json;
  json.max_whitespace = c.max_whitespace;
  switch (c.kind) {
    case OutputConstraint::Kind::kNone:
      return absl::InvalidArgumentError("no constraint");
    case OutputConstraint::Kind::kJsonObject:
      return JsonObjectGbnf(json);
    case OutputConstraint::Kind::kJsonSchema:
      return JsonSchemaToGbnf(c.schema, json);
    case OutputConstraint::Kind::kRegex: {
      auto body = RegexToGbnf(c.text, {});
      if (!body.ok()) return body.status();
      return absl::StrCat("root ::= ", *body, "\n");
    }
    case OutputConstraint::Kind::kChoice: {
      if (c.choices.empty()) return absl::InvalidArgumentError("choice: must not be empty");
      std::vector<std::string> literals;
      for (const auto& choice : c.choices) literals.push_back(GbnfLiteral(choice));
      return absl::StrCat("root ::= ", absl::StrJoin(literals, " | "), "\n");
    }
    case OutputConstraint::Kind::kGrammar:
      return c.text;
  }
  return absl::InvalidArgumentError("an unknown constraint");
}

GrammarCache& GrammarCache::Shared() {
  static auto* cache = new GrammarCache(256);
  return *cache;
}

size_t GrammarCache::size() const {
  absl::MutexLock lock(&mu_);
  return order_.size();
}

absl::StatusOr<std::shared_ptr<const Grammar>> GrammarCache::Get(const OutputConstraint& c,
                                                                 CompileInfo* info) {
  const std::string key = c.Key();
  std::shared_ptr<const Grammar> hit;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      hit = it->second->second;
    }
  }
  if (hit) {
    const CompileInfo cached{true, 0};
    if (info) *info = cached;
    if (GrammarCacheObserver* observer = observer_.load()) observer->OnGet(cached);
    return hit;
  }
  // Compiled outside the lock: two requests may both compile a new
  // constraint, and the later one's result replaces nothing.
  const auto start = std::chrono::steady_clock::now();
  auto gbnf = ConstraintGbnf(c);
  if (!gbnf.ok()) return gbnf.status();
  auto grammar = Grammar::FromGbnf(*gbnf);
  if (!grammar.ok()) return grammar.status();
  auto shared = std::make_shared<const Grammar>(*std::move(grammar));
  const CompileInfo compiled{
      false, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
  if (info) *info = compiled;
  if (GrammarCacheObserver* observer = observer_.load()) observer->OnGet(compiled);
  absl::MutexLock lock(&mu_);
  if (index_.count(key)) return shared;
  order_.emplace_front(key, shared);
  index_[key] = order_.begin();
  while (order_.size() > capacity_) {
    index_.erase(order_.back().first);
    order_.pop_back();
  }
  return shared;
}

}  // namespace attn::grammar
