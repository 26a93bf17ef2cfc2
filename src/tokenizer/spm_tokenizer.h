// SentencePiece-style tokenizer (GGUF tokenizer.ggml.model = "llama"): spaces become U+2581,
// adjacent pieces merge by score, and characters outside the vocabulary fall back to byte tokens
// <0xNN>.
#pragma once

#include <array>

#include "tokenizer/vocab_tokenizer.h"

namespace kestrel::tokenizer {

class SpmTokenizer final : public VocabTokenizer {
 public:
  explicit SpmTokenizer(VocabData vocab);
  std::string token_to_piece(TokenId id, bool render_special) const override;

 protected:
  void encode_text(std::string_view text, bool follows_special,
                   std::vector<TokenId>& out) const override;
  bool decode_strips_leading_space() const override { return vocab_.add_space_prefix; }

 private:
  void append_bytes(std::string_view bytes, std::vector<TokenId>& out) const;
  // Runs the merge loop over one stretch of normalised text.
  void encode_segment(std::string_view normalized, std::vector<TokenId>& out) const;

  // Pieces the merge loop may form. Control, unknown and byte tokens are left out: SentencePiece
  // never produces them from text ("<s>" typed by a user stays text).
  TokenIndex mergeable_;
  std::array<TokenId, 256> byte_tokens_;  // id of <0xNN>, or -1
  // ASCII bytes that occur in no mergeable token longer than one byte (for Llama, '\n' and most
  // control characters). Such a byte can never merge with a neighbour, so the text is cut there
  // and each piece merged on its own: same result, but much smaller merge queues.
  std::array<bool, 128> never_merges_{};
};

}  // namespace kestrel::tokenizer
