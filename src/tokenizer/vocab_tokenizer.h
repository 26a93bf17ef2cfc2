// The part of a tokenizer that does not depend on the algorithm: vocabulary checks, token lookup
// by text, special-token splitting, BOS/EOS, whole-sequence decoding and end-of-generation ids.
// SpmTokenizer, BpeTokenizer and WpmTokenizer fill in how plain text becomes ids and how an id
// becomes bytes.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/special_tokens.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::tokenizer {

// Lets a std::string-keyed map be searched with a string_view without building a string.
struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIndex = std::unordered_map<std::string, TokenId, StringViewHash, std::equal_to<>>;

// U+2581 LOWER ONE EIGHTH BLOCK: a space inside SentencePiece, SentencePiece-style BPE and WordPiece
// pieces (for WordPiece, the converter's mark of a word's first piece).
inline constexpr std::string_view kSpaceMarker = "\xe2\x96\x81";

inline TokenId lookup(const TokenIndex& index, std::string_view text) {
  const auto it = index.find(text);
  return it == index.end() ? -1 : it->second;
}

// Checks the shape of a vocabulary (array lengths, special ids in range, byte-token spelling) and
// throws kestrel::Error naming the first problem. Fills an empty `types` with Normal.
void validate_vocab(VocabData& vocab);

// Parses an SPM byte token "<0xNN>"; returns -1 if `text` is not one.
int parse_byte_token(std::string_view text);

class VocabTokenizer : public Tokenizer {
 public:
  // `vocab` must have passed validate_vocab.
  explicit VocabTokenizer(VocabData vocab);

  std::vector<TokenId> encode(std::string_view text, bool add_special,
                              bool parse_special) const final;
  std::string decode(std::span<const TokenId> ids, bool render_special) const final;
  const VocabData& vocab() const final { return vocab_; }
  bool is_end_of_generation(TokenId id) const final;
  std::vector<TokenId> stop_token_ids() const final { return end_of_generation_; }
  TokenId find_token(std::string_view text) const final;

 protected:
  // Tokenizes one stretch of plain text (never empty). `follows_special` is true at the start of
  // the input and right after a special token.
  virtual void encode_text(std::string_view text, bool follows_special,
                           std::vector<TokenId>& out) const = 0;
  // True when decode() should drop the leading space of the first piece (SPM's added space).
  virtual bool decode_strips_leading_space() const { return false; }
  // Last touches to a whole decoded sequence (WordPiece: the spaces before punctuation).
  virtual void finish_decode(std::string& /*text*/) const {}

  // A piece of a vocabulary that writes spaces as U+2581 (SentencePiece, WordPiece): normal tokens
  // with U+2581 as ' ', byte tokens <0xNN> as the byte, user-defined ones as stored, control and
  // unknown ones only when rendering, undefined and unused ones as nothing (as llama.cpp).
  std::string marked_piece(TokenId id, bool render_special) const;
  // Throws kestrel::Error unless 0 <= id < vocab_size().
  void check_id(TokenId id) const;
  TokenType type_of(TokenId id) const { return vocab_.types[size_t(id)]; }
  // Control and unknown tokens are written out only when render_special is set.
  bool hidden_unless_rendering(TokenId id) const {
    return type_of(id) == TokenType::Control || type_of(id) == TokenType::Unknown;
  }

  VocabData vocab_;

 private:
  TokenIndex by_text_;
  SpecialTokenSplitter specials_;
  std::vector<TokenId> end_of_generation_;
};

}  // namespace kestrel::tokenizer
