// Per-request text output: incremental detokenization plus stop strings. Text is released only
// when it is final: held-back bytes of an incomplete UTF-8 character, and any tail that could be
// the start of a stop string, wait for the next token. A matched stop string is never emitted,
// even when it spans token boundaries.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace kestrel {

class TextOutput {
 public:
  // `last_prompt_token` primes the detokenizer (SentencePiece strips the space after BOS only).
  TextOutput(const Tokenizer& tokenizer, TokenId last_prompt_token, std::vector<std::string> stop);

  // Feeds one generated token. Returns the text that became final. After a stop string matched,
  // stopped() is true and later calls return nothing.
  std::string push(TokenId token);
  // The request ended for another reason (EOS, length, abort): release what was held back.
  std::string finish();

  bool stopped() const { return stopped_; }
  const std::string& matched_stop() const { return matched_stop_; }

 private:
  const Tokenizer& tokenizer_;
  StreamingDetokenizer detokenizer_;
  std::vector<std::string> stop_;
  std::string held_;  // decoded text not yet released (could begin a stop string)
  bool stopped_ = false;
  std::string matched_stop_;
};

}  // namespace kestrel
