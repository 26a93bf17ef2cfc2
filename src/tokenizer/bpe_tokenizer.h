// Byte-level BPE tokenizer (GGUF tokenizer.ggml.model = "gpt2", and tiktoken vocabularies): the
// text is cut into words by the pre-tokenizer, and each word's bytes are merged pair by pair,
// lowest rank first. Ranks come from the GGUF merges list, or for tiktoken from the id of the
// token a pair forms. With a SentencePiece-style pre-tokenizer (Gemma 4: tokenizer.ggml.model =
// "gemma4") tokens are raw UTF-8 with U+2581 for a space instead: the text's spaces become U+2581,
// words are merged character by character, and what is left unmerged and is no token falls back
// to <0xNN> byte tokens.
#pragma once

#include <array>
#include <memory>
#include <unordered_map>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab_tokenizer.h"

namespace kestrel::tokenizer {

class BpeTokenizer final : public VocabTokenizer {
 public:
  explicit BpeTokenizer(VocabData vocab);
  std::string token_to_piece(TokenId id, bool render_special) const override;

 protected:
  void encode_text(std::string_view text, bool follows_special,
                   std::vector<TokenId>& out) const override;

 private:
  struct Merge {
    int32_t rank;
    TokenId result;
  };
  static uint64_t pair_key(TokenId left, TokenId right) {
    return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  }
  void build_merges();
  void encode_word(std::string_view word, std::vector<TokenId>& out) const;

  std::unique_ptr<PreTokenizer> pre_;
  std::vector<std::string> token_bytes_;  // the raw bytes each token stands for
  // Raw bytes (raw UTF-8 vocabs: the stored text) -> id for the tokens merging may produce (not
  // control, unknown, user-defined or byte-fallback tokens).
  TokenIndex mergeable_;
  std::array<TokenId, 256> byte_tokens_;  // the one-byte (raw UTF-8: <0xNN>) token of each byte, or -1
  std::unordered_map<uint64_t, Merge> merges_;  // (left, right) -> merge; empty for tiktoken
};

}  // namespace kestrel::tokenizer
