// Byte-level BPE tokenizer (GGUF tokenizer.ggml.model = "gpt2", and tiktoken vocabularies): the
// text is cut into words by the pre-tokenizer, and each word's bytes are merged pair by pair,
// lowest rank first. Ranks come from the GGUF merges list, or for tiktoken from the id of the
// token a pair forms.
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
  // Raw bytes -> id for the tokens merging may produce (not control, unknown or user-defined).
  TokenIndex mergeable_;
  std::array<TokenId, 256> byte_tokens_;  // the one-byte token of each byte value, or -1
  std::unordered_map<uint64_t, Merge> merges_;  // (left, right) -> merge; empty for tiktoken
};

}  // namespace kestrel::tokenizer
