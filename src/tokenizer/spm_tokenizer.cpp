#include "tokenizer/spm_tokenizer.h"

#include <cstdint>

#include "core/error.h"
#include "tokenizer/merge_queue.h"

namespace kestrel::tokenizer {

namespace {


}  // namespace

SpmTokenizer::SpmTokenizer(VocabData vocab) : VocabTokenizer(std::move(vocab)) {
  byte_tokens_.fill(-1);
  mergeable_.reserve(vocab_.tokens.size());
  for (size_t i = 0; i < vocab_.tokens.size(); ++i) {
    const TokenType type = vocab_.types[i];
    if (type == TokenType::Byte) {
      const int byte = parse_byte_token(vocab_.tokens[i]);
      if (byte_tokens_[size_t(byte)] < 0) byte_tokens_[size_t(byte)] = TokenId(i);
    } else if (type != TokenType::Control && type != TokenType::Unknown) {
      mergeable_.emplace(vocab_.tokens[i], TokenId(i));
    }
  }
  never_merges_.fill(true);
  for (const auto& [text, id] : mergeable_) {
    if (text.size() < 2) continue;
    for (const char c : text) {
      if (uint8_t(c) < 0x80) never_merges_[uint8_t(c)] = false;
    }
  }
}

void SpmTokenizer::append_bytes(std::string_view bytes, std::vector<TokenId>& out) const {
  for (const char c : bytes) {
    const TokenId id = byte_tokens_[uint8_t(c)];
    if (id >= 0) {
      out.push_back(id);
    } else if (vocab_.unk_id >= 0) {
      out.push_back(vocab_.unk_id);
    } else {
      fail("tokenizer: cannot encode byte 0x{:02X}: the vocabulary has neither <0x{:02X}> nor an "
           "unknown token",
           uint8_t(c), uint8_t(c));
    }
  }
}

void SpmTokenizer::encode_text(std::string_view text, bool follows_special,
                               std::vector<TokenId>& out) const {
  // SentencePiece's normalisation: a dummy space in front (llama.cpp adds it at the start of the
  // input and again after every special token), then every space spelled U+2581.
  std::string normalized;
  normalized.reserve(text.size() + 3);
  if (vocab_.add_space_prefix && follows_special) normalized += kSpaceMarker;
  for (const char c : text) {
    if (c == ' ') {
      normalized += kSpaceMarker;
    } else {
      normalized += c;
    }
  }
  if (normalized.size() > size_t(INT32_MAX)) fail("tokenizer: text too long ({} bytes)", text.size());

  // Cut at bytes that never merge, but only where a symbol starts (an invalid lead byte takes the
  // bytes after it into its symbol, whatever they are).
  const std::string_view all(normalized);
  size_t segment_start = 0;
  size_t pos = 0;
  while (pos < all.size()) {
    const auto byte = uint8_t(all[pos]);
    if (byte < 0x80 && never_merges_[byte]) {
      encode_segment(all.substr(segment_start, pos - segment_start), out);
      encode_segment(all.substr(pos, 1), out);
      segment_start = pos + 1;
    }
    pos += symbol_length_from_lead(byte);
  }
  if (segment_start < all.size()) encode_segment(all.substr(segment_start), out);
}

void SpmTokenizer::encode_segment(std::string_view normalized, std::vector<TokenId>& out) const {
  if (normalized.empty()) return;
  const bool have_scores = !vocab_.scores.empty();
  auto find_pair = [&](const Symbol&, const Symbol&, std::string_view joined,
                       PairCandidate& candidate) {
    const TokenId id = lookup(mergeable_, joined);
    if (id < 0) return false;
    candidate.id = id;
    candidate.priority = have_scores ? vocab_.scores[size_t(id)] : 0.0;
    return true;
  };
  auto initial_id = [&](std::string_view character) { return lookup(mergeable_, character); };
  const std::vector<Symbol> symbols =
      merge_symbols(normalized, /*split_into_bytes=*/false, find_pair, initial_id);

  for (int32_t i = 0; i >= 0; i = symbols[size_t(i)].next) {
    const Symbol& s = symbols[size_t(i)];
    if (s.id >= 0) {
      out.push_back(s.id);
    } else {
      // A character the vocabulary lacks (merged symbols are always tokens): byte fallback.
      append_bytes(normalized.substr(s.begin, s.length), out);
    }
  }
}

std::string SpmTokenizer::token_to_piece(TokenId id, bool render_special) const {
  return marked_piece(id, render_special);
}

}  // namespace kestrel::tokenizer
