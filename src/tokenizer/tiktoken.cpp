// Tokenizer::from_tiktoken_llama3: Meta's Llama 3 tokenizer.model (one "base64-token rank" line per
// ordinary token) plus the 256 special tokens that Meta's tokenizer.py appends after them.
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/byte_alphabet.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

namespace {

int base64_digit(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Standard base64 with '=' padding; returns false on anything else.
bool decode_base64(std::string_view text, std::string& out) {
  out.clear();
  if (text.size() % 4 != 0) return false;
  size_t padding = 0;
  while (padding < 2 && padding < text.size() && text[text.size() - 1 - padding] == '=') ++padding;
  uint32_t bits = 0;
  int bit_count = 0;
  for (size_t i = 0; i + padding < text.size(); ++i) {
    const int digit = base64_digit(text[i]);
    if (digit < 0) return false;
    bits = (bits << 6) | uint32_t(digit);
    bit_count += 6;
    if (bit_count >= 8) {
      bit_count -= 8;
      out += char((bits >> bit_count) & 0xff);
    }
  }
  // Padding leaves 2 or 4 spare bits, which must be zero in canonical base64.
  return (bits & ((1u << bit_count) - 1)) == 0;
}

// Meta's names: ids 128000.. in this order, then reserved tokens up to 256 in all.
std::vector<std::string> llama3_special_tokens() {
  std::vector<std::string> names = {
      "<|begin_of_text|>",
      "<|end_of_text|>",
      "<|reserved_special_token_0|>",
      "<|reserved_special_token_1|>",
      "<|reserved_special_token_2|>",
      "<|reserved_special_token_3|>",
      "<|start_header_id|>",
      "<|end_header_id|>",
      "<|reserved_special_token_4|>",
      "<|eot_id|>",
  };
  for (int i = 5; names.size() < 256; ++i) {
    names.push_back("<|reserved_special_token_" + std::to_string(i) + "|>");
  }
  return names;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_tiktoken_llama3(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open tiktoken file", path);

  std::vector<std::string> by_rank;
  std::vector<bool> seen;
  std::string line;
  std::string bytes;
  size_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || line.find(' ', space + 1) != std::string::npos) {
      fail("{}:{}: expected '<base64 token> <rank>'", path, line_number);
    }
    const std::string_view rank_text = std::string_view(line).substr(space + 1);
    uint64_t rank = 0;
    if (rank_text.empty() || rank_text.size() > 9) {
      fail("{}:{}: bad rank '{}'", path, line_number, rank_text);
    }
    for (const char c : rank_text) {
      if (c < '0' || c > '9') fail("{}:{}: bad rank '{}'", path, line_number, rank_text);
      rank = rank * 10 + uint64_t(c - '0');
    }
    if (!decode_base64(std::string_view(line).substr(0, space), bytes) || bytes.empty()) {
      fail("{}:{}: bad base64 token '{}'", path, line_number, line.substr(0, space));
    }
    if (rank >= by_rank.size()) {
      by_rank.resize(rank + 1);
      seen.resize(rank + 1, false);
    }
    if (seen[rank]) fail("{}:{}: rank {} appears twice", path, line_number, rank);
    seen[rank] = true;
    by_rank[rank] = tokenizer::bytes_to_alphabet(bytes);
  }
  if (by_rank.empty()) fail("{}: no tokens in tiktoken file", path);
  for (size_t rank = 0; rank < seen.size(); ++rank) {
    if (!seen[rank]) fail("{}: rank {} is missing (ranks must be 0 to {})", path, rank, seen.size() - 1);
  }

  VocabData vocab;
  vocab.kind = VocabKind::BytePairEncoding;
  vocab.pre = "llama-bpe";
  vocab.add_space_prefix = false;
  const TokenId first_special = TokenId(by_rank.size());
  vocab.tokens = std::move(by_rank);
  vocab.types.assign(vocab.tokens.size(), TokenType::Normal);
  for (std::string& name : llama3_special_tokens()) {
    vocab.tokens.push_back(std::move(name));
    vocab.types.push_back(TokenType::Control);
  }
  vocab.bos_id = first_special;      // <|begin_of_text|>
  vocab.eos_id = first_special + 1;  // <|end_of_text|>
  vocab.eot_id = first_special + 9;  // <|eot_id|>
  vocab.add_bos = true;
  vocab.add_eos = false;
  try {
    return create(std::move(vocab));
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
}

}  // namespace kestrel
