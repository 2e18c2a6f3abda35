#include "model/text/text_assembler.h"

#include <algorithm>
#include <utility>

namespace attn {

TextAssembler::TextAssembler(const Tokenizer& tokenizer, std::vector<std::string> stop)
    : decoder_(tokenizer, /*continues_text=*/true), stop_(std::move(stop)) {}

std::string TextAssembler::Push(int64_t id) {
  if (stopped_) return {};
  held_ += decoder_.Push(id);
  size_t first_stop = std::string::npos;
  for (const std::string& stop : stop_) {
    first_stop = std::min(first_stop, held_.find(stop));
  }
  if (first_stop != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first_stop);
    held_.clear();
    return out;
  }
  const size_t keep = PossibleStopStart();
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string TextAssembler::Finish() {
  if (stopped_) return {};
  std::string out = std::move(held_) + decoder_.Finish();
  held_.clear();
  return out;
}

size_t TextAssembler::PossibleStopStart() const {
  size_t longest = 0;
  for (const std::string& stop : stop_) {
    const size_t max_len = std::min(held_.size(), stop.size() - 1);
    for (size_t len = max_len; len > longest; --len) {
      if (held_.compare(held_.size() - len, len, stop, 0, len) == 0) {
        longest = len;
        break;
      }
    }
  }
  return longest;
}

}  // namespace attn
