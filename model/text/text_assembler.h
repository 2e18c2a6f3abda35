// Turns a sequence's generated token ids into the text a client sees:
// whole UTF-8 characters only (IncrementalDecoder), and nothing at or after
// the first stop string. Text that could be the start of a stop string is
// held back until the next tokens decide it, so a stop string split over
// several tokens is never half-emitted.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/text/tokenizer.h"

namespace attn {

class TextAssembler {
 public:
  // `stop`: non-empty UTF-8 strings. The ids continue a prompt, so the space
  // before their first word is kept.
  TextAssembler(const Tokenizer& tokenizer, std::vector<std::string> stop);

  // Adds one token; returns the text it releases (possibly empty). Once a
  // stop string completes, returns the text before it and stopped() is true;
  // later calls return nothing.
  std::string Push(int64_t id);
  // The end of the sequence (not by a stop string): releases what was held.
  std::string Finish();
  bool stopped() const { return stopped_; }

 private:
  // Length of the longest suffix of held_ that is a proper prefix of a stop
  // string.
  size_t PossibleStopStart() const;

  IncrementalDecoder decoder_;
  std::vector<std::string> stop_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace attn
