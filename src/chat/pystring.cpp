#include "chat/pystring.h"

#include <algorithm>

#include "chat/value.h"
#include "core/utf8.h"

namespace kestrel::chat::pystr {

std::u32string decode(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t used = 0;
    out.push_back(static_cast<char32_t>(utf8_decode(text.substr(pos), &used)));
    pos += used == 0 ? 1 : used;
  }
  return out;
}

std::string encode(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) out += utf8_encode(static_cast<uint32_t>(c));
  return out;
}

size_t length(std::string_view text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

bool is_space(char32_t c) {
  if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) return true;
  if (c < 0x85) return false;
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

char32_t to_upper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if (c == 0x138 || c == 0x149 || c == 0x130) return c;
    bool odd_is_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    bool is_lower = odd_is_upper ? (c % 2 == 0) : (c % 2 == 1);
    return is_lower ? c - 1 : c;
  }
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
  return c;
}

char32_t to_lower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x130) return 'i';
    if (c == 0x138 || c == 0x149 || c == 0x131 || c == 0x17F) return c;
    bool odd_is_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    bool is_upper = odd_is_upper ? (c % 2 == 1) : (c % 2 == 0);
    return is_upper ? c + 1 : c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
  return c;
}

bool is_cased(char32_t c) { return to_upper(c) != c || to_lower(c) != c || c == 0xDF; }

namespace {

bool in_chars(char32_t c, const std::u32string& chars) { return chars.find(c) != std::u32string::npos; }

// One code point of `s` upper-cased, with Python's special case of ß -> SS.
void append_upper(std::u32string& out, char32_t c) {
  if (c == 0xDF) {
    out += U"SS";
  } else {
    out += to_upper(c);
  }
}

// Byte offset -> code point offset.
int64_t code_point_index(std::string_view s, size_t byte_offset) {
  return static_cast<int64_t>(length(s.substr(0, byte_offset)));
}

}  // namespace

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::u32string text = decode(s);
  std::u32string set = chars ? decode(*chars) : std::u32string();
  auto strippable = [&](char32_t c) { return chars ? in_chars(c, set) : is_space(c); };
  size_t begin = 0, end = text.size();
  if (left)
    while (begin < end && strippable(text[begin])) ++begin;
  if (right)
    while (end > begin && strippable(text[end - 1])) --end;
  return encode(std::u32string_view(text).substr(begin, end - begin));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) script_error("empty separator");
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t found = s.find(*sep, pos);
      if (found == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, found - pos));
      pos = found + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  std::u32string text = decode(s);
  size_t i = 0, n = text.size();
  while (true) {
    while (i < n && is_space(text[i])) ++i;
    if (i == n) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(encode(std::u32string_view(text).substr(i)));  // the rest keeps its trailing space
      break;
    }
    size_t start = i;
    while (i < n && !is_space(text[i])) ++i;
    out.push_back(encode(std::u32string_view(text).substr(start, i - start)));
  }
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  if (maxsplit < 0) return split(s, sep, maxsplit);
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) script_error("empty separator");
    size_t end = s.size();
    while (static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t found = s.rfind(*sep, end - sep->size());
      if (found == std::string_view::npos) break;
      out.emplace_back(s.substr(found + sep->size(), end - found - sep->size()));
      end = found;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    std::u32string text = decode(s);
    size_t i = text.size();
    while (true) {
      while (i > 0 && is_space(text[i - 1])) --i;
      if (i == 0) break;
      if (static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(encode(std::u32string_view(text).substr(0, i)));  // keeps its leading space
        break;
      }
      size_t end = i;
      while (i > 0 && !is_space(text[i - 1])) --i;
      out.push_back(encode(std::u32string_view(text).substr(i, end - i)));
    }
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::u32string text = decode(s);
  std::vector<std::string> out;
  size_t start = 0, i = 0;
  auto is_break = [](char32_t c) {
    return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
           c == 0x2028 || c == 0x2029;
  };
  while (i < text.size()) {
    if (!is_break(text[i])) {
      ++i;
      continue;
    }
    size_t end = i;
    size_t next = i + ((text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ? 2 : 1);
    out.push_back(encode(std::u32string_view(text).substr(start, (keepends ? next : end) - start)));
    start = i = next;
  }
  if (start < text.size()) out.push_back(encode(std::u32string_view(text).substr(start)));
  return out;
}

std::string upper(std::string_view s) {
  std::u32string out;
  for (char32_t c : decode(s)) append_upper(out, c);
  return encode(out);
}

std::string lower(std::string_view s) {
  std::u32string text = decode(s);
  for (char32_t& c : text) c = to_lower(c);
  return encode(text);
}

std::string title(std::string_view s) {
  std::u32string out;
  bool previous_cased = false;
  for (char32_t c : decode(s)) {
    if (is_cased(c)) {
      if (previous_cased) {
        out += to_lower(c);
      } else if (c == 0xDF) {
        out += U"Ss";
      } else {
        out += to_upper(c);
      }
      previous_cased = true;
    } else {
      out += c;
      previous_cased = false;
    }
  }
  return encode(out);
}

std::string capitalize(std::string_view s) {
  std::u32string text = decode(s);
  std::u32string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (i == 0) {
      if (text[0] == 0xDF) {
        out += U"Ss";
      } else {
        out += to_upper(text[0]);
      }
    } else {
      out += to_lower(text[i]);
    }
  }
  return encode(out);
}

std::string replace(std::string_view s, std::string_view old, std::string_view replacement, int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts the replacement around every code point.
    std::u32string text = decode(s);
    int64_t done = 0;
    for (size_t i = 0; i <= text.size(); ++i) {
      if (count < 0 || done < count) {
        out += replacement;
        ++done;
      }
      if (i < text.size()) out += utf8_encode(static_cast<uint32_t>(text[i]));
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t found = s.find(old, pos);
    if (found == std::string_view::npos) break;
    out.append(s.substr(pos, found - pos));
    out.append(replacement);
    pos = found + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

int64_t find(std::string_view s, std::string_view needle, bool reverse) {
  size_t found = reverse ? s.rfind(needle) : s.find(needle);
  if (found == std::string_view::npos) return -1;
  return code_point_index(s, found);
}

int64_t count(std::string_view s, std::string_view needle) {
  if (needle.empty()) return static_cast<int64_t>(length(s)) + 1;
  int64_t n = 0;
  size_t pos = 0;
  while ((pos = s.find(needle, pos)) != std::string_view::npos) {
    ++n;
    pos += needle.size();
  }
  return n;
}

bool all_of(std::string_view s, bool (*predicate)(char32_t)) {
  std::u32string text = decode(s);
  if (text.empty()) return false;
  return std::all_of(text.begin(), text.end(), predicate);
}

namespace {

bool printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if ((c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x206F))
    return false;
  if (c == 0x1680 || c == 0x180E || c == 0x3000 || c == 0xFEFF) return false;
  if ((c >= 0xD800 && c <= 0xF8FF) || (c >= 0xFFF0 && c <= 0xFFFB) || c > 0x10FFFF) return false;
  return true;
}

void append_hex(std::string& out, char prefix, uint32_t value, int digits) {
  static const char* hex = "0123456789abcdef";
  out += '\\';
  out += prefix;
  for (int shift = (digits - 1) * 4; shift >= 0; shift -= 4) out += hex[(value >> shift) & 0xF];
}

}  // namespace

std::string repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!printable(c)) {
      if (c < 0x100) {
        append_hex(out, 'x', c, 2);
      } else if (c < 0x10000) {
        append_hex(out, 'u', c, 4);
      } else {
        append_hex(out, 'U', c, 8);
      }
    } else {
      out += utf8_encode(static_cast<uint32_t>(c));
    }
  }
  out += quote;
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace kestrel::chat::pystr
