// GPT-2's reversible byte-to-unicode alphabet. Byte-level BPE vocabularies (GGUF "gpt2") store every
// token as a string in this alphabet so that each of the 256 byte values is one printable
// character: printable Latin-1 bytes stand for themselves and the others are shifted to U+0100 up.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kestrel::tokenizer {

// The alphabet character (as a code point) that stands for `byte`.
uint32_t byte_to_alphabet_code_point(uint8_t byte);

// Raw bytes -> alphabet text (each byte becomes one UTF-8 encoded alphabet character).
std::string bytes_to_alphabet(std::string_view bytes);

// Alphabet text -> raw bytes. Characters outside the alphabet (which appear only in hand-added
// tokens) are kept as their own UTF-8 bytes. *all_in_alphabet, if given, tells whether none were.
std::string alphabet_to_bytes(std::string_view text, bool* all_in_alphabet = nullptr);

}  // namespace kestrel::tokenizer
