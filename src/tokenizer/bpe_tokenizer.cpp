#include "tokenizer/bpe_tokenizer.h"

#include "core/error.h"
#include "tokenizer/byte_alphabet.h"
#include "tokenizer/merge_queue.h"

namespace kestrel::tokenizer {

BpeTokenizer::BpeTokenizer(VocabData vocab) : VocabTokenizer(std::move(vocab)) {
  pre_ = PreTokenizer::for_pre(vocab_.pre);
  byte_tokens_.fill(-1);
  const size_t n = vocab_.tokens.size();
  token_bytes_.resize(n);
  mergeable_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const TokenType type = vocab_.types[i];
    if (type == TokenType::Control || type == TokenType::Unknown || type == TokenType::UserDefined) {
      token_bytes_[i] = vocab_.tokens[i];  // written as they are, not in the byte alphabet
      continue;
    }
    token_bytes_[i] = alphabet_to_bytes(vocab_.tokens[i]);
    const TokenId id = TokenId(i);
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
  pre_->split(text, words);
  for (const std::string_view word : words) encode_word(word, out);
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<TokenId>& out) const {
  if (pre_->word_as_whole_token()) {
    const TokenId whole = lookup(mergeable_, word);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
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
  auto initial_id = [&](std::string_view byte) { return byte_tokens_[uint8_t(byte[0])]; };
  const std::vector<Symbol> symbols =
      merge_symbols(word, /*split_into_bytes=*/true, find_pair, initial_id);

  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[size_t(i)].next) {
    const Symbol& s = symbols[size_t(i)];
    if (s.id >= 0) {
      out.push_back(s.id);
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
