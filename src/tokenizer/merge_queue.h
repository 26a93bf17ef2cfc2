// The merge loop shared by the SentencePiece and BPE encoders: a text split into symbols (a doubly
// linked list over byte ranges), and a priority queue of adjacent pairs that may merge. Each merge
// re-queues the pairs with the new symbol's neighbours, so a text of n characters takes
// O(n log n), not the O(n^2) of rescanning for the best pair after every merge.
#pragma once

#include <cstddef>
#include <cstdint>
#include <queue>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace kestrel::tokenizer {

struct Symbol {
  size_t begin = 0;    // byte offset in the text
  size_t length = 0;   // 0 once merged into its left neighbour
  int32_t prev = -1;
  int32_t next = -1;
  TokenId id = -1;     // the token this symbol is, or -1 (a character not in the vocabulary)
};

// Bytes in a character that starts with `lead`, judged by the lead byte alone (as llama.cpp does,
// so that invalid UTF-8 splits into the same symbols there and here): 0xF8-0xFF count as 4-byte
// leads, and a stray continuation byte is a character of its own.
inline size_t symbol_length_from_lead(uint8_t lead) {
  if (lead < 0xc0) return 1;
  if (lead < 0xe0) return 2;
  if (lead < 0xf0) return 3;
  return 4;
}

// A pair of adjacent symbols that would merge into `id`. `priority`: larger merges first; ties go
// to the leftmost pair.
struct PairCandidate {
  double priority = 0;
  int32_t left = -1;
  int32_t right = -1;
  size_t length = 0;   // left.length + right.length when queued; a mismatch means it is stale
  TokenId id = -1;

  bool operator<(const PairCandidate& other) const {
    if (priority != other.priority) return priority < other.priority;
    return left > other.left;
  }
};

// Runs the merge loop. `find_pair(left_symbol, right_symbol, joined_text, &candidate)` fills in
// priority and id and returns true if the two may merge. `initial_id(char_text)` gives the id of
// a one-character symbol (or -1). Returns the symbols; follow `next` from index 0 for the result.
template <typename FindPair, typename InitialId>
std::vector<Symbol> merge_symbols(std::string_view text, bool split_into_bytes,
                                  FindPair&& find_pair, InitialId&& initial_id) {
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t len = split_into_bytes ? 1 : symbol_length_from_lead(uint8_t(text[pos]));
    if (pos + len > text.size()) len = text.size() - pos;
    Symbol s;
    s.begin = pos;
    s.length = len;
    s.prev = int32_t(symbols.size()) - 1;
    s.next = pos + len == text.size() ? -1 : int32_t(symbols.size()) + 1;
    s.id = initial_id(text.substr(pos, len));
    symbols.push_back(s);
    pos += len;
  }

  std::priority_queue<PairCandidate> queue;
  auto try_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& a = symbols[size_t(left)];
    const Symbol& b = symbols[size_t(right)];
    PairCandidate candidate;
    candidate.left = left;
    candidate.right = right;
    candidate.length = a.length + b.length;
    if (find_pair(a, b, text.substr(a.begin, candidate.length), candidate)) queue.push(candidate);
  };

  for (size_t i = 1; i < symbols.size(); ++i) try_pair(int32_t(i - 1), int32_t(i));
  while (!queue.empty()) {
    const PairCandidate best = queue.top();
    queue.pop();
    Symbol& left = symbols[size_t(best.left)];
    Symbol& right = symbols[size_t(best.right)];
    // Stale: one side was merged away or grew since the pair was queued.
    if (left.length == 0 || right.length == 0 || left.next != best.right ||
        left.length + right.length != best.length) {
      continue;
    }
    left.length += right.length;
    left.id = best.id;
    left.next = right.next;
    right.length = 0;
    if (right.next >= 0) symbols[size_t(right.next)].prev = best.left;
    try_pair(left.prev, best.left);
    try_pair(best.left, left.next);
  }
  return symbols;
}

}  // namespace kestrel::tokenizer
