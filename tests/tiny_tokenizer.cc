#include "tests/tiny_tokenizer.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "tests/test_corpus.h"

namespace attn::testing {

const Tokenizer& TinyTokenizer() {
  static const Tokenizer* tokenizer = [] {
    ScopedTempDir dir("tiny_tokenizer");
    WriteSyntheticCorpus(dir.File("corpus.txt"), {"the", "river", "keeps", "its", "small", "state",
                                                  "and", "light", "falls", "over", "stone", "water",
                                                  "night", "finds", "a", "garden", "stop", "here"});
    TokenizerTrainOptions options;
    options.input_files = {dir.File("corpus.txt")};
    options.vocab_size = 300;
    auto trained = Tokenizer::Train(options);
    if (!trained.ok()) {
      std::fprintf(stderr, "tokenizer: %s\n", trained.status().ToString().c_str());
      std::abort();
    }
    return new Tokenizer(std::move(*trained));
  }();
  return *tokenizer;
}

}  // namespace attn::testing
