#include "engine/text_output.h"

#include <algorithm>

namespace kestrel {

TextOutput::TextOutput(const Tokenizer& tokenizer, TokenId last_prompt_token,
                       std::vector<std::string> stop)
    : tokenizer_(tokenizer), detokenizer_(tokenizer), stop_(std::move(stop)) {
  stop_.erase(std::remove(stop_.begin(), stop_.end(), std::string()), stop_.end());
  if (last_prompt_token >= 0) detokenizer_.prime(last_prompt_token);
}

std::string TextOutput::push(TokenId token) {
  if (stopped_) return "";
  // End-of-generation tokens carry no text of their own.
  if (tokenizer_.is_end_of_generation(token)) return "";
  held_ += detokenizer_.push(token);

  // The earliest complete stop string ends the output just before it.
  size_t earliest = std::string::npos;
  for (const std::string& s : stop_) {
    const size_t at = held_.find(s);
    if (at != std::string::npos && at < earliest) {
      earliest = at;
      matched_stop_ = s;
    }
  }
  if (earliest != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, earliest);
    held_.clear();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& s : stop_) {
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string TextOutput::finish() {
  if (stopped_) return "";
  std::string out = held_ + detokenizer_.flush();
  held_.clear();
  return out;
}

}  // namespace kestrel
