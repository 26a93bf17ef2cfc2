#include "tokenizer/bpe_tokenizer.h"

#include <string_view>

#include "core/error.h"
#include "tokenizer/byte_alphabet.h"
#include "tokenizer/merge_queue.h"

namespace kestrel::tokenizer {

namespace {


std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = text.find(from, pos);
    out.append(text.substr(pos, hit == std::string_view::npos ? std::string_view::npos : hit - pos));
    if (hit == std::string_view::npos) return out;
    out.append(to);
    pos = hit + from.size();
  }
}

}  // namespace

BpeTokenizer::BpeTokenizer(VocabData vocab) : VocabTokenizer(std::move(vocab)) {
  pre_ = PreTokenizer::for_pre(vocab_.pre);
  const bool raw = pre_->raw_utf8();
  byte_tokens_.fill(-1);
  const size_t n = vocab_.tokens.size();
  token_bytes_.resize(n);
  mergeable_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const TokenType type = vocab_.types[i];
    const std::string& text = vocab_.tokens[i];
    const TokenId id = TokenId(i);
    if (type == TokenType::Control || type == TokenType::Unknown || type == TokenType::UserDefined) {
      token_bytes_[i] = text;  // written as they are, not in the byte alphabet
      continue;
    }
    if (raw) {
      // SentencePiece-style: bytes are <0xNN> tokens used only as a fallback; other tokens are
      // merged and looked up as stored (U+2581 for a space), and stand for their text.
      if (type == TokenType::Byte) {
        const int byte = parse_byte_token(text);
        if (byte < 0) fail("tokenizer: token {} '{}' has type byte but is not written <0xNN>", i, text);
        token_bytes_[i] = std::string(1, char(byte));
        if (byte_tokens_[size_t(byte)] < 0) byte_tokens_[size_t(byte)] = id;
        continue;
      }
      token_bytes_[i] = replace_all(text, kSpaceMarker, " ");
      mergeable_.emplace(text, id);
      continue;
    }
    token_bytes_[i] = alphabet_to_bytes(text);
    mergeable_.emplace(token_bytes_[i], id);
    if (token_bytes_[i].size() == 1) {
      TokenId& slot = byte_tokens_[uint8_t(token_bytes_[i][0])];
      if (slot < 0) slot = id;
    }
  }
  build_merges();
}

void BpeTokenizer::build_merges() {
  if (vocab_.merges.empty()) return;  // tiktoken: ranks are the ids of the joined tokens
  const TokenId limit = TokenId(vocab_.tokens.size());
  merges_.reserve(vocab_.merges.size());
  for (size_t rank = 0; rank < vocab_.merges.size(); ++rank) {
    const std::string_view entry = vocab_.merges[rank];
    // Parts never contain a space (the byte alphabet spells it U+0120), so the entry has exactly
    // one. Search from 1 as llama.cpp does, in case a hand-made part is a lone space.
    const size_t space = entry.find(' ', 1);
    if (space == std::string_view::npos || space + 1 >= entry.size()) {
      fail("tokenizer: merges entry {} '{}' is not of the form 'left right'", rank, entry);
    }
    const std::string_view left_text = entry.substr(0, space);
    const std::string_view right_text = entry.substr(space + 1);
    const TokenId left = find_token(left_text);
    const TokenId right = find_token(right_text);
    if (left < 0 || right < 0) {
      fail("tokenizer: merges entry {} '{}': '{}' is not a token", rank, entry,
           left < 0 ? left_text : right_text);
    }
    const TokenId result = find_token(std::string(left_text) + std::string(right_text));
    // A merge whose result is not a token could never be part of an encoding; skip it.
    if (result < 0 || result >= limit) continue;
    merges_.emplace(pair_key(left, right), Merge{int32_t(rank), result});  // first rank wins
  }
}

void BpeTokenizer::encode_text(std::string_view text, bool /*follows_special*/,
                               std::vector<TokenId>& out) const {
  std::vector<std::string_view> words;
  if (pre_->raw_utf8()) {
    const std::string escaped = replace_all(text, " ", kSpaceMarker);
    pre_->split(escaped, words);
    for (const std::string_view word : words) encode_word(word, out);
    return;
  }
  pre_->split(text, words);
  for (const std::string_view word : words) encode_word(word, out);
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<TokenId>& out) const {
  if (pre_->word_as_whole_token() ||
      (pre_->newline_runs_as_tokens() && word.find_first_not_of('\n') == std::string_view::npos)) {
    const TokenId whole = lookup(mergeable_, word);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  const bool raw = pre_->raw_utf8();
  const bool ranks_from_ids = merges_.empty();
  auto find_pair = [&](const Symbol& a, const Symbol& b, std::string_view joined,
                       PairCandidate& candidate) {
    if (ranks_from_ids) {
      const TokenId id = lookup(mergeable_, joined);
      if (id < 0) return false;
      candidate.id = id;
      candidate.priority = -double(id);  // lower rank merges first
      return true;
    }
    if (a.id < 0 || b.id < 0) return false;
    const auto it = merges_.find(pair_key(a.id, b.id));
    if (it == merges_.end()) return false;
    candidate.id = it->second.result;
    candidate.priority = -double(it->second.rank);
    return true;
  };
  // Byte-level words start as bytes (each is a token of the alphabet); raw UTF-8 words start as
  // characters, which may not be tokens (those fall back to <0xNN> below).
  auto initial_id = [&](std::string_view symbol) {
    return raw ? lookup(mergeable_, symbol) : byte_tokens_[uint8_t(symbol[0])];
  };
  const std::vector<Symbol> symbols =
      merge_symbols(word, /*split_into_bytes=*/!raw, find_pair, initial_id);

  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[size_t(i)].next) {
    const Symbol& s = symbols[size_t(i)];
    if (s.id >= 0) {
      out.push_back(s.id);
    } else if (raw) {
      // Byte fallback; a byte with no <0xNN> token is dropped, as llama.cpp does.
      for (const char byte : word.substr(s.begin, s.length)) {
        const TokenId id = byte_tokens_[uint8_t(byte)];
        if (id >= 0) out.push_back(id);
      }
    } else if (vocab_.unk_id >= 0) {
      out.push_back(vocab_.unk_id);  // a byte with no token of its own
    }
    // else: dropped, as llama.cpp does; a byte-level vocabulary normally has all 256 bytes.
  }
}

std::string BpeTokenizer::token_to_piece(TokenId id, bool render_special) const {
  check_id(id);
  switch (type_of(id)) {
    case TokenType::Control:
    case TokenType::Unknown:
      return render_special ? vocab_.tokens[size_t(id)] : std::string();
    case TokenType::UserDefined:
    case TokenType::Normal:
    case TokenType::Byte:
      return token_bytes_[size_t(id)];
    case TokenType::Undefined:
    case TokenType::Unused:
      break;
  }
  return std::string();  // llama.cpp renders undefined and unused tokens as nothing
}

}  // namespace kestrel::tokenizer
