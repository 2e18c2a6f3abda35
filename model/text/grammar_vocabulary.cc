#include "model/text/grammar_vocabulary.h"

#include <string>
#include <vector>

namespace attn {

std::shared_ptr<const grammar::TokenTrie> GrammarVocabulary(const Tokenizer& tokenizer) {
  std::vector<std::string> tokens(tokenizer.text_vocab_size());
  for (int64_t id = 0; id < tokenizer.text_vocab_size(); ++id) {
    if (id != tokenizer.eos_id() && tokenizer.SpecialText(id).empty()) {
      tokens[id] = tokenizer.TokenBytes(id);
    }
  }
  return std::make_shared<const grammar::TokenTrie>(tokens);
}

}  // namespace attn
