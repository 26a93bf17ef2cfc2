#include "chat/lexer.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "chat/pystring.h"
#include "chat/template_error.h"
#include "core/utf8.h"

namespace kestrel::chat {
namespace {

constexpr size_t kMaxTagTokens = 4000;

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// \r\n and \r become \n, and one trailing newline is dropped (keep_trailing_newline=False).
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t tag = find_tag_start(pos_);
      if (tag == std::string::npos) {
        emit_data(pos_, src_.substr(pos_));
        break;
      }
      char kind = src_[tag + 1];  // '{', '%' or '#'
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      bool has_sign = sign == '-' || sign == '+';
      std::string text = src_.substr(pos_, tag - pos_);
      if (sign == '-') {
        text = pystr::strip(text, std::nullopt, false, true);
      } else if (sign != '+' && kind != '{') {
        text = lstrip_line(text, line_starting);
      }
      emit_data(pos_, text);
      size_t after = tag + 2 + (has_sign ? 1 : 0);
      if (kind == '#') {
        line_starting = skip_comment(tag, after);
      } else if (kind == '%' && try_raw(tag, after)) {
        line_starting = false;
      } else {
        push(kind == '{' ? TokenType::VarBegin : TokenType::BlockBegin, "", tag);
        pos_ = after;
        line_starting = lex_tag(kind == '{', tag);
      }
    }
    push(TokenType::End, "", src_.size());
    return std::move(tokens_);
  }

 private:
  std::string src_;
  std::vector<size_t> line_starts_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;

  [[noreturn]] void fail(size_t offset, const std::string& message) const {
    auto [line, column] = position(offset);
    throw ChatTemplateError(ChatTemplateError::Kind::Syntax, line, column, message);
  }

  std::pair<int, int> position(size_t offset) const {
    offset = std::min(offset, src_.size());
    auto after = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line_index = static_cast<size_t>(after - line_starts_.begin()) - 1;
    size_t line_start = line_starts_[line_index];
    int column =
        1 + static_cast<int>(pystr::length(std::string_view(src_).substr(line_start, offset - line_start)));
    return {static_cast<int>(line_index) + 1, column};
  }

  void push(TokenType type, std::string value, size_t offset) {
    Token token;
    token.type = type;
    token.value = std::move(value);
    auto [line, column] = position(offset);
    token.line = line;
    token.column = column;
    tokens_.push_back(std::move(token));
  }

  void emit_data(size_t offset, std::string text) {
    if (!text.empty()) push(TokenType::Data, std::move(text), offset);
  }

  size_t find_tag_start(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  // lstrip_blocks: drop the spaces between the start of the line and a block or comment tag.
  static std::string lstrip_line(const std::string& text, bool line_starting) {
    size_t newline = text.rfind('\n');
    size_t line_begin = newline == std::string::npos ? 0 : newline + 1;
    if (line_begin == 0 && !line_starting) return text;
    std::string_view tail = std::string_view(text).substr(line_begin);
    if (tail.empty()) return text;
    for (char32_t c : pystr::decode(tail))
      if (!pystr::is_space(c)) return text;
    return text.substr(0, line_begin);
  }

  // Skips whitespace after a `-` end marker; returns whether the consumed text ended in a newline.
  bool skip_whitespace_after(size_t from) {
    size_t p = from;
    while (p < src_.size()) {
      size_t used = 0;
      char32_t c = static_cast<char32_t>(utf8_decode(std::string_view(src_).substr(p), &used));
      if (!pystr::is_space(c)) break;
      p += used;
    }
    pos_ = p;
    return p > from && src_[p - 1] == '\n';
  }

  // Consumes `{# ... #}`; returns whether the consumed text ended in a newline.
  bool skip_comment(size_t tag, size_t body) {
    for (size_t p = body; p + 1 < src_.size(); ++p) {
      if (src_[p] == '+' && src_.compare(p + 1, 2, "#}") == 0) {
        pos_ = p + 3;
        return false;
      }
      if (src_[p] == '-' && src_.compare(p + 1, 2, "#}") == 0) return skip_whitespace_after(p + 3);
      if (src_[p] == '#' && src_[p + 1] == '}') {
        pos_ = p + 2;
        if (pos_ < src_.size() && src_[pos_] == '\n') {
          ++pos_;
          return true;
        }
        return false;
      }
    }
    fail(tag, "Missing end of comment tag");
  }

  // `{% raw %}...{% endraw %}` becomes one data token.
  bool try_raw(size_t tag, size_t after) {
    size_t p = after;
    while (p < src_.size() && pystr::is_space(static_cast<unsigned char>(src_[p]))) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && pystr::is_space(static_cast<unsigned char>(src_[p]))) ++p;
    if (src_.compare(p, 3, "-%}") == 0) {
      skip_whitespace_after(p + 3);
    } else if (src_.compare(p, 2, "%}") == 0) {
      pos_ = p + 2;
    } else {
      return false;
    }
    size_t body = pos_;
    for (size_t q = src_.find("{%", body); q != std::string::npos; q = src_.find("{%", q + 1)) {
      size_t r = q + 2;
      char sign = r < src_.size() ? src_[r] : '\0';
      if (sign == '-' || sign == '+') ++r;
      while (r < src_.size() && pystr::is_space(static_cast<unsigned char>(src_[r]))) ++r;
      if (src_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      while (r < src_.size() && pystr::is_space(static_cast<unsigned char>(src_[r]))) ++r;
      std::string text = src_.substr(body, q - body);
      if (sign == '-') {
        text = pystr::strip(text, std::nullopt, false, true);
      } else if (sign != '+') {
        text = lstrip_line(text, false);
      }
      if (src_.compare(r, 3, "+%}") == 0) {
        pos_ = r + 3;
      } else if (src_.compare(r, 3, "-%}") == 0) {
        skip_whitespace_after(r + 3);
      } else if (src_.compare(r, 2, "%}") == 0) {
        pos_ = r + 2;
        if (pos_ < src_.size() && src_[pos_] == '\n') ++pos_;
      } else {
        continue;
      }
      emit_data(body, text);
      return true;
    }
    fail(tag, "Missing end of raw directive");
  }

  // Lexes the inside of `{{ ... }}` or `{% ... %}` up to and including its end marker. Returns
  // whether the end marker's match ended in a newline (jinja2's line_starting for lstrip_blocks).
  bool lex_tag(bool variable, size_t tag) {
    std::vector<char> brackets;
    size_t first_token = tokens_.size();
    while (true) {
      // Bounds the depth of the expression trees built from one tag (and so the recursion that
      // parses, evaluates and frees them).
      if (tokens_.size() - first_token > kMaxTagTokens)
        fail(tag, fmt::format("tag too long (more than {} tokens)", kMaxTagTokens));
      if (pos_ >= src_.size())
        fail(tag, variable ? "unexpected end of template, expected end of print statement"
                           : "unexpected end of template, expected end of statement block");
      if (brackets.empty()) {
        if (variable) {
          if (src_.compare(pos_, 3, "-}}") == 0) {
            push(TokenType::VarEnd, "", pos_);
            return skip_whitespace_after(pos_ + 3);
          }
          if (src_.compare(pos_, 2, "}}") == 0) {
            push(TokenType::VarEnd, "", pos_);
            pos_ += 2;
            return false;
          }
        } else {
          if (src_.compare(pos_, 3, "+%}") == 0) {
            push(TokenType::BlockEnd, "", pos_);
            pos_ += 3;
            return false;
          }
          if (src_.compare(pos_, 3, "-%}") == 0) {
            push(TokenType::BlockEnd, "", pos_);
            return skip_whitespace_after(pos_ + 3);
          }
          if (src_.compare(pos_, 2, "%}") == 0) {
            push(TokenType::BlockEnd, "", pos_);
            pos_ += 2;
            if (pos_ < src_.size() && src_[pos_] == '\n') {
              ++pos_;
              return true;
            }
            return false;
          }
        }
      }
      lex_one(brackets);
    }
  }

  void lex_one(std::vector<char>& brackets) {
    char c = src_[pos_];
    if (pystr::is_space(static_cast<unsigned char>(c))) {
      ++pos_;
      return;
    }
    if (is_digit(c)) return lex_number();
    if (is_name_start(c)) {
      size_t end = pos_;
      while (end < src_.size() && is_name_char(src_[end])) ++end;
      push(TokenType::Name, src_.substr(pos_, end - pos_), pos_);
      pos_ = end;
      return;
    }
    if (c == '\'' || c == '"') return lex_string();
    static const char* const two_char_ops[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : two_char_ops) {
      if (src_.compare(pos_, 2, op) == 0) {
        push(TokenType::Operator, op, pos_);
        pos_ += 2;
        return;
      }
    }
    static const std::string single_ops = "+-/*%~[](){}=<>.:|,;";
    if (single_ops.find(c) == std::string::npos)
      fail(pos_, fmt::format("unexpected char {} at {}", pystr::repr(std::string(1, c)), pos_));
    if (c == '(' || c == '[' || c == '{') {
      brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty()) fail(pos_, fmt::format("unexpected '{}'", c));
      if (brackets.back() != c) fail(pos_, fmt::format("unexpected '{}', expected '{}'", c, brackets.back()));
      brackets.pop_back();
    }
    push(TokenType::Operator, std::string(1, c), pos_);
    ++pos_;
  }

  // Digits with optional `_` separators starting at p; returns the end.
  size_t digits_end(size_t p, bool (*accept)(char)) const {
    size_t end = p;
    while (end < src_.size() && (accept(src_[end]) || (src_[end] == '_' && end > p && end + 1 < src_.size() &&
                                                       accept(src_[end + 1]))))
      ++end;
    return end;
  }

  void lex_number() {
    size_t start = pos_;
    auto [line, column] = position(start);
    Token token;
    token.line = line;
    token.column = column;
    auto dec = [](char ch) { return is_digit(ch); };
    auto keep_digits = [&](size_t from, size_t to) {
      std::string text;
      for (size_t i = from; i < to; ++i)
        if (src_[i] != '_') text += src_[i];
      return text;
    };
    char prefix = start + 1 < src_.size() ? static_cast<char>(src_[start + 1] | 0x20) : '\0';
    if (src_[start] == '0' && (prefix == 'x' || prefix == 'o' || prefix == 'b')) {
      int base = prefix == 'x' ? 16 : prefix == 'o' ? 8 : 2;
      auto hex = [](char ch) { return is_digit(ch) || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F'); };
      size_t end = digits_end(start + 2, hex);
      std::string text = keep_digits(start + 2, end);
      token.type = TokenType::Integer;
      auto result = std::from_chars(text.data(), text.data() + text.size(), token.integer, base);
      if (text.empty() || result.ec != std::errc() || result.ptr != text.data() + text.size())
        fail(start, "invalid integer literal");
      token.value = src_.substr(start, end - start);
      tokens_.push_back(std::move(token));
      pos_ = end;
      return;
    }
    size_t end = digits_end(start, dec);
    bool is_float = false;
    if (end + 1 < src_.size() && src_[end] == '.' && is_digit(src_[end + 1]) &&
        (start == 0 || src_[start - 1] != '.')) {
      end = digits_end(end + 1, dec);
      is_float = true;
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t e = end + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && is_digit(src_[e])) {
        end = digits_end(e, dec);
        is_float = true;
      }
    }
    std::string text = keep_digits(start, end);
    if (is_float) {
      token.type = TokenType::Float;
      token.number = std::strtod(text.c_str(), nullptr);
    } else {
      token.type = TokenType::Integer;
      auto result = std::from_chars(text.data(), text.data() + text.size(), token.integer);
      if (result.ec != std::errc()) fail(start, "integer literal out of range");
    }
    token.value = src_.substr(start, end - start);
    tokens_.push_back(std::move(token));
    pos_ = end;
  }

  void lex_string() {
    size_t start = pos_;
    char quote = src_[pos_];
    size_t p = pos_ + 1;
    std::string raw;
    while (true) {
      if (p >= src_.size()) fail(start, "unexpected end of string");
      char c = src_[p];
      if (c == quote) break;
      if (c == '\\' && p + 1 < src_.size()) {
        raw += c;
        raw += src_[p + 1];
        p += 2;
        continue;
      }
      raw += c;
      ++p;
    }
    push(TokenType::String, unescape(raw, start), start);
    pos_ = p + 1;
  }

  // Python's "unicode-escape" decoding, which jinja2 applies to string literals.
  std::string unescape(const std::string& raw, size_t offset) const {
    std::string out;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '\\' || i + 1 >= raw.size()) {
        out += raw[i];
        continue;
      }
      char e = raw[++i];
      switch (e) {
        case '\n': break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i + n >= raw.size()) fail(offset, "truncated \\" + std::string(1, e) + " escape");
          uint32_t cp = 0;
          auto result = std::from_chars(raw.data() + i + 1, raw.data() + i + 1 + n, cp, 16);
          if (result.ec != std::errc() || result.ptr != raw.data() + i + 1 + n)
            fail(offset, "truncated \\" + std::string(1, e) + " escape");
          out += utf8_encode(cp);
          i += n;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i + 1 < raw.size() && raw[i + 1] >= '0' && raw[i + 1] <= '7'; ++k)
              cp = cp * 8 + static_cast<uint32_t>(raw[++i] - '0');
            out += utf8_encode(cp);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    return out;
  }
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(normalize_newlines(source)).run(); }

std::string describe_token(const Token& token) {
  switch (token.type) {
    case TokenType::Data: return "template data";
    case TokenType::VarBegin: return "begin of print statement";
    case TokenType::VarEnd: return "end of print statement";
    case TokenType::BlockBegin: return "begin of statement block";
    case TokenType::BlockEnd: return "end of statement block";
    case TokenType::String: return "string";
    case TokenType::Integer: return "integer";
    case TokenType::Float: return "float";
    case TokenType::End: return "end of template";
    default: return token.value;
  }
}

}  // namespace kestrel::chat
