// A tokenizer's vocabulary as structured output's grammars see it
// (model/grammar/matcher.h).
#pragma once

#include <memory>

#include "model/grammar/matcher.h"
#include "model/text/tokenizer.h"

namespace attn {

// Each token's bytes: what it adds to the text; nothing for the
// end-of-sequence, special and control tokens, which a grammar never
// allows (the end is allowed where the grammar's text is complete).
std::shared_ptr<const grammar::TokenTrie> GrammarVocabulary(const Tokenizer& tokenizer);

}  // namespace attn
