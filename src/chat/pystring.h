// Python str operations on UTF-8 strings, counted in code points as Python counts them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kestrel::chat::pystr {

std::u32string decode(std::string_view text);
std::string encode(std::u32string_view text);
size_t length(std::string_view text);  // number of code points

// str.isspace() for one code point (Unicode White_Space plus the ASCII separators Python counts).
bool is_space(char32_t c);
// Simple case mappings: ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic and full-width Latin.
// Other scripts are left unchanged (Python maps every cased script).
char32_t to_upper(char32_t c);
char32_t to_lower(char32_t c);
bool is_cased(char32_t c);

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep, maxsplit) / str.rsplit; no separator splits on runs of whitespace.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends);
std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);       // str.title()
std::string capitalize(std::string_view s);  // str.capitalize()
std::string replace(std::string_view s, std::string_view old, std::string_view replacement, int64_t count);
// str.find / str.rfind / str.count on code point positions (-1 when absent).
int64_t find(std::string_view s, std::string_view needle, bool reverse);
int64_t count(std::string_view s, std::string_view needle);
bool all_of(std::string_view s, bool (*predicate)(char32_t));
// The string as a Python literal: repr(s).
std::string repr(std::string_view s);
// markupsafe.escape.
std::string html_escape(std::string_view s);

}  // namespace kestrel::chat::pystr
