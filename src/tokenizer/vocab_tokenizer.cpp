#include "tokenizer/vocab_tokenizer.h"

#include <algorithm>
#include <cstdint>

#include "core/error.h"

namespace kestrel::tokenizer {

namespace {

int hex_digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

void check_special_id(const char* name, TokenId id, size_t vocab_size) {
  if (id == -1) return;
  if (id < 0 || size_t(id) >= vocab_size) {
    fail("tokenizer: {} {} is out of range (the vocabulary has {} tokens)", name, id, vocab_size);
  }
}

// Chat models end a turn with one of these control tokens even when the file names no EOT id.
constexpr const char* kEndOfTurnTexts[] = {"<|eot_id|>", "<|eom_id|>", "<|im_end|>",
                                           "<|end|>",    "<end_of_turn>"};

}  // namespace

int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  const int high = hex_digit_value(text[3]);
  const int low = hex_digit_value(text[4]);
  if (high < 0 || low < 0) return -1;
  return high * 16 + low;
}

void validate_vocab(VocabData& vocab) {
  const size_t n = vocab.tokens.size();
  if (n == 0) fail("tokenizer: the vocabulary has no tokens");
  if (n > size_t(INT32_MAX)) fail("tokenizer: the vocabulary has too many tokens ({})", n);
  if (!vocab.scores.empty() && vocab.scores.size() != n) {
    fail("tokenizer: {} scores for {} tokens (scores must be absent or one per token)",
         vocab.scores.size(), n);
  }
  if (!vocab.types.empty() && vocab.types.size() != n) {
    fail("tokenizer: {} token types for {} tokens (token_type must be absent or one per token)",
         vocab.types.size(), n);
  }
  if (vocab.types.empty()) vocab.types.assign(n, TokenType::Normal);
  for (size_t i = 0; i < n; ++i) {
    const auto raw = int32_t(vocab.types[i]);
    if (raw < int32_t(TokenType::Undefined) || raw > int32_t(TokenType::Byte)) {
      fail("tokenizer: token {} '{}' has unknown token type {}", i, vocab.tokens[i], raw);
    }
    if (vocab.kind != VocabKind::BytePairEncoding && vocab.types[i] == TokenType::Byte &&
        parse_byte_token(vocab.tokens[i]) < 0) {
      fail("tokenizer: token {} '{}' has type byte but is not written <0xNN>", i, vocab.tokens[i]);
    }
  }
  check_special_id("bos_id", vocab.bos_id, n);
  check_special_id("eos_id", vocab.eos_id, n);
  check_special_id("unk_id", vocab.unk_id, n);
  check_special_id("pad_id", vocab.pad_id, n);
  check_special_id("eot_id", vocab.eot_id, n);
  check_special_id("sep_id", vocab.sep_id, n);
  if (vocab.add_bos && vocab.bos_id < 0) fail("tokenizer: add_bos is set but there is no BOS id");
  if (vocab.add_eos && vocab.eos_id < 0) fail("tokenizer: add_eos is set but there is no EOS id");
  if (vocab.add_sep && vocab.sep_id < 0) fail("tokenizer: add_sep is set but there is no separator id");
}

VocabTokenizer::VocabTokenizer(VocabData vocab) : vocab_(std::move(vocab)), specials_(vocab_) {
  by_text_.reserve(vocab_.tokens.size());
  for (size_t i = 0; i < vocab_.tokens.size(); ++i) {
    by_text_.emplace(vocab_.tokens[i], TokenId(i));  // a duplicate text keeps its first id
  }
  for (const TokenId id : {vocab_.eos_id, vocab_.eot_id}) {
    if (id >= 0) end_of_generation_.push_back(id);
  }
  for (const char* text : kEndOfTurnTexts) {
    const TokenId id = lookup(by_text_, text);
    if (id >= 0 && type_of(id) == TokenType::Control) end_of_generation_.push_back(id);
  }
}

void VocabTokenizer::check_id(TokenId id) const {
  if (id < 0 || size_t(id) >= vocab_.tokens.size()) {
    fail("tokenizer: token id {} is out of range (the vocabulary has {} tokens)", id,
         vocab_.tokens.size());
  }
}

std::vector<TokenId> VocabTokenizer::encode(std::string_view text, bool add_special,
                                            bool parse_special) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && vocab_.add_bos) out.push_back(vocab_.bos_id);
  bool follows_special = true;
  for (const Fragment& fragment : specials_.split(text, parse_special)) {
    if (fragment.is_token()) {
      out.push_back(fragment.token);
      follows_special = true;
    } else {
      encode_text(fragment.text, follows_special, out);
      follows_special = false;
    }
  }
  if (add_special && vocab_.add_eos) out.push_back(vocab_.eos_id);
  if (add_special && vocab_.add_sep) out.push_back(vocab_.sep_id);
  return out;
}

std::string VocabTokenizer::decode(std::span<const TokenId> ids, bool render_special) const {
  std::string text;
  // The encoder put one space in front of the text; take it off the first token of the text, which
  // is the first token or the one right after BOS (StreamingDetokenizer follows the same rule).
  const bool strips = decode_strips_leading_space();
  TokenId previous = -1;
  for (const TokenId id : ids) {
    check_id(id);
    std::string piece = token_to_piece(id, render_special);
    const bool starts_text = previous < 0 || previous == vocab_.bos_id;
    if (strips && starts_text && id != vocab_.bos_id && !piece.empty() && piece.front() == ' ') {
      piece.erase(0, 1);
    }
    text += piece;
    previous = id;
  }
  finish_decode(text);
  return text;
}

bool VocabTokenizer::is_end_of_generation(TokenId id) const {
  return id >= 0 &&
         std::find(end_of_generation_.begin(), end_of_generation_.end(), id) != end_of_generation_.end();
}

TokenId VocabTokenizer::find_token(std::string_view text) const { return lookup(by_text_, text); }

std::string VocabTokenizer::marked_piece(TokenId id, bool render_special) const {
  check_id(id);
  const std::string& text = vocab_.tokens[size_t(id)];
  switch (type_of(id)) {
    case TokenType::Control:
    case TokenType::Unknown:
      return render_special ? text : std::string();
    case TokenType::UserDefined:
      return text;
    case TokenType::Byte:
      return std::string(1, char(parse_byte_token(text)));
    case TokenType::Normal: {
      std::string piece;
      piece.reserve(text.size());
      for (size_t pos = 0; pos < text.size();) {
        if (std::string_view(text).substr(pos, kSpaceMarker.size()) == kSpaceMarker) {
          piece += ' ';
          pos += kSpaceMarker.size();
        } else {
          piece += text[pos++];
        }
      }
      return piece;
    }
    case TokenType::Undefined:
    case TokenType::Unused:
      break;
  }
  return std::string();  // llama.cpp renders undefined and unused tokens as nothing
}

}  // namespace kestrel::tokenizer
