#include "core/utf8.h"

namespace kestrel {

size_t utf8_complete_prefix(std::string_view text) {
  // Walk back from the end over at most 3 continuation bytes to the last lead byte.
  const size_t n = text.size();
  size_t i = n;
  size_t continuation = 0;
  while (i > 0 && continuation < 4) {
    const uint8_t byte = uint8_t(text[i - 1]);
    if ((byte & 0xc0) != 0x80) {
      const size_t need = utf8_sequence_length(byte);
      // A lead byte whose sequence is not yet complete: stop before it.
      if (byte >= 0x80 && need > continuation + 1) return i - 1;
      return n;
    }
    ++continuation;
    --i;
  }
  return n;  // only continuation bytes (invalid): emit them as they are
}

std::vector<std::string_view> utf8_split_chars(std::string_view text) {
  std::vector<std::string_view> chars;
  size_t i = 0;
  while (i < text.size()) {
    size_t len = utf8_sequence_length(uint8_t(text[i]));
    if (i + len > text.size()) len = text.size() - i;
    chars.push_back(text.substr(i, len));
    i += len;
  }
  return chars;
}

std::string utf8_encode(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xc0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += char(0xe0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  } else {
    out += char(0xf0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3f));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  }
  return out;
}

uint32_t utf8_decode(std::string_view text, size_t* consumed) {
  const uint8_t lead = uint8_t(text[0]);
  const size_t len = utf8_sequence_length(lead);
  if (len == 1 || len > text.size()) {
    *consumed = 1;
    return lead;
  }
  uint32_t cp = lead & (0xff >> (len + 1));
  for (size_t k = 1; k < len; ++k) {
    const uint8_t byte = uint8_t(text[k]);
    if ((byte & 0xc0) != 0x80) {
      *consumed = 1;
      return lead;
    }
    cp = (cp << 6) | (byte & 0x3f);
  }
  *consumed = len;
  return cp;
}

}  // namespace kestrel
