// Cuts text into plain-text fragments and special tokens written out literally ("<s>",
// "<|eot_id|>"), before the text itself is tokenized.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace kestrel::tokenizer {

// Either a stretch of text to tokenize (token < 0) or one special token.
struct Fragment {
  std::string_view text;
  TokenId token = -1;
  bool is_token() const { return token >= 0; }
};

class SpecialTokenSplitter {
 public:
  explicit SpecialTokenSplitter(const VocabData& vocab);

  // Control and unknown tokens are recognised only when parse_special is set; user-defined tokens
  // always are, as in llama.cpp (and Hugging Face tokenizers, where added tokens are split out
  // before the model sees the text). Text fragments are never empty.
  std::vector<Fragment> split(std::string_view text, bool parse_special) const;

 private:
  struct Candidate {
    TokenId id;
    std::string text;
    bool needs_parse_special;
  };
  // Longest text first, so that a special token that contains another wins over it.
  std::vector<Candidate> candidates_;
};

}  // namespace kestrel::tokenizer
