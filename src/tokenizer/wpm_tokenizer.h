// BERT's WordPiece tokenizer (GGUF tokenizer.ggml.model = "bert"), as llama.cpp's
// llm_tokenizer_wpm runs it. The text is normalised and split into words: control characters,
// U+0000 and U+FFFD dropped, optionally lowercased and its accents stripped (each code point's
// NFD base, marks dropped); whitespace ends a word; punctuation, ASCII symbols and CJK ideographs
// are words of their own. Each word, prefixed with U+2581 (the converter stores word-initial
// pieces as "▁piece" and "##piece" continuations as "piece"), becomes the longest vocabulary
// tokens from left to right; a word with any position that no token covers becomes [UNK].
// Decoding writes U+2581 as a space and then closes the spaces before . , ! ? and around
// apostrophes as llama.cpp's clean_spaces does.
#pragma once

#include "tokenizer/vocab_tokenizer.h"

namespace kestrel::tokenizer {

class WpmTokenizer final : public VocabTokenizer {
 public:
  explicit WpmTokenizer(VocabData vocab);
  std::string token_to_piece(TokenId id, bool render_special) const override;

  // The normalised words of `text` (exposed for tests).
  std::vector<std::string> split_words(std::string_view text) const;

 protected:
  void encode_text(std::string_view text, bool follows_special, std::vector<TokenId>& out) const override;
  void finish_decode(std::string& text) const override;

 private:
  size_t max_token_bytes_ = 0;
};

}  // namespace kestrel::tokenizer
