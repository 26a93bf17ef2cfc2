// UTF-8 helpers shared by the tokenizers and the streaming detokenizer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kestrel {

// Length in bytes of the UTF-8 sequence that starts with `lead` (1 for invalid lead bytes, so that
// callers always make progress).
inline size_t utf8_sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xe0) == 0xc0) return 2;
  if ((lead & 0xf0) == 0xe0) return 3;
  if ((lead & 0xf8) == 0xf0) return 4;
  return 1;
}

// Number of leading bytes of `text` that form whole UTF-8 characters; a trailing incomplete
// sequence (which may still be completed by later bytes) is excluded.
size_t utf8_complete_prefix(std::string_view text);

// Characters in text as Python and JavaScript count them (code points): every byte that does not
// continue a sequence starts one, so a piece that ends mid-character counts the character once,
// where it starts.
inline size_t utf8_char_count(std::string_view text) {
  size_t count = 0;
  for (unsigned char c : text) count += (c & 0xc0) != 0x80;
  return count;
}

// Splits text into UTF-8 characters (invalid bytes become one-byte pieces).
std::vector<std::string_view> utf8_split_chars(std::string_view text);

// Encodes one code point as UTF-8.
std::string utf8_encode(uint32_t code_point);

// Decodes one code point from the start of text; returns the code point and advances *consumed.
// Invalid sequences decode as the single byte value and consume one byte.
uint32_t utf8_decode(std::string_view text, size_t* consumed);

}  // namespace kestrel
