#include "tokenizer/byte_alphabet.h"

#include <array>

#include "core/utf8.h"

namespace kestrel::tokenizer {

namespace {

// Bytes that GPT-2 considered printable keep their own code point.
bool is_printable_byte(uint32_t b) {
  return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

struct AlphabetTables {
  std::array<uint32_t, 256> code_point_of_byte{};
  // Every alphabet code point is below 0x144 (256 + 68 non-printable bytes).
  std::array<int16_t, 0x200> byte_of_code_point{};
  std::array<std::string, 256> utf8_of_byte;

  AlphabetTables() {
    byte_of_code_point.fill(-1);
    uint32_t next_shifted = 256;  // non-printable bytes take 256, 257, ... in byte order
    for (uint32_t b = 0; b < 256; ++b) {
      const uint32_t cp = is_printable_byte(b) ? b : next_shifted++;
      code_point_of_byte[b] = cp;
      byte_of_code_point[cp] = int16_t(b);
      utf8_of_byte[b] = utf8_encode(cp);
    }
  }
};

const AlphabetTables& tables() {
  static const AlphabetTables instance;
  return instance;
}

}  // namespace

uint32_t byte_to_alphabet_code_point(uint8_t byte) { return tables().code_point_of_byte[byte]; }

std::string bytes_to_alphabet(std::string_view bytes) {
  const AlphabetTables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out += t.utf8_of_byte[uint8_t(c)];
  return out;
}

std::string alphabet_to_bytes(std::string_view text, bool* all_in_alphabet) {
  const AlphabetTables& t = tables();
  std::string out;
  out.reserve(text.size());
  bool all = true;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t consumed = 0;
    const uint32_t cp = utf8_decode(text.substr(pos), &consumed);
    const bool multi_byte = consumed > 1;
    const int16_t byte =
        (cp < t.byte_of_code_point.size() && (multi_byte || cp < 0x80)) ? t.byte_of_code_point[cp]
                                                                        : int16_t(-1);
    if (byte >= 0) {
      out += char(byte);
    } else {
      out.append(text.substr(pos, consumed));
      all = false;
    }
    pos += consumed;
  }
  if (all_in_alphabet != nullptr) *all_in_alphabet = all;
  return out;
}

}  // namespace kestrel::tokenizer
