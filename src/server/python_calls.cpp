#include "server/python_calls.h"

#include <cctype>
#include <charconv>

#include "core/utf8.h"

namespace kestrel::server {

namespace {

using json = nlohmann::ordered_json;

// A recursive-descent reader of calls and Python literals; every method returns false (or
// nullopt) on anything it does not recognise.
class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}

  std::optional<std::vector<PythonCall>> calls() {
    std::vector<PythonCall> out;
    for (;;) {
      skip_space(/*newlines=*/true);
      while (pos_ < s_.size() && s_[pos_] == ';') ++pos_, skip_space(true);
      if (pos_ == s_.size()) break;
      PythonCall c;
      if (!call(&c)) return std::nullopt;
      out.push_back(std::move(c));
      skip_space(false);
      if (pos_ < s_.size() && s_[pos_] != '\n' && s_[pos_] != ';') return std::nullopt;
    }
    if (out.empty()) return std::nullopt;
    return out;
  }

 private:
  void skip_space(bool newlines) {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\r' || (newlines && s_[pos_] == '\n'))) {
      ++pos_;
    }
  }
  bool eat(char c) {
    skip_space(true);  // inside brackets Python allows newlines
    if (pos_ < s_.size() && s_[pos_] == c) return ++pos_, true;
    return false;
  }
  // After an item of a bracketed list: a comma (consumed), or the closing bracket (left for the
  // caller's eat, so a trailing comma is allowed).
  bool next_item(char close) {
    if (eat(',')) return true;
    skip_space(true);
    return pos_ < s_.size() && s_[pos_] == close;
  }
  std::optional<std::string> identifier() {
    skip_space(true);
    const size_t start = pos_;
    while (pos_ < s_.size() && (std::isalnum(uint8_t(s_[pos_])) || s_[pos_] == '_' || (s_[pos_] == '.' && pos_ > start))) {
      ++pos_;
    }
    if (pos_ == start || std::isdigit(uint8_t(s_[start]))) return std::nullopt;
    return std::string(s_.substr(start, pos_ - start));
  }
  bool call(PythonCall* c) {
    const auto name = identifier();
    if (!name || !eat('(')) return false;
    c->name = *name;
    bool keywords = false;
    while (!eat(')')) {
      skip_space(true);
      const size_t mark = pos_;
      const auto key = identifier();
      if (key && eat('=') && (pos_ >= s_.size() || s_[pos_] != '=')) {
        json v;
        if (!value(&v) || c->keywords.contains(*key)) return false;
        c->keywords[*key] = std::move(v);
        keywords = true;
      } else {
        pos_ = mark;
        json v;
        if (keywords || !value(&v)) return false;  // positional after keyword: not Python
        c->positional.push_back(std::move(v));
      }
      if (!next_item(')')) return false;
    }
    return true;
  }
  // A sequence of values up to `close` (a trailing comma allowed).
  bool sequence(char close, json* out) {
    *out = json::array();
    while (!eat(close)) {
      json v;
      if (!value(&v)) return false;
      out->push_back(std::move(v));
      if (!next_item(close)) return false;
    }
    return true;
  }
  bool value(json* out) {
    skip_space(true);
    if (pos_ >= s_.size()) return false;
    const char c = s_[pos_];
    if (c == '\'' || c == '"') return string(out);
    if (c == '[') return ++pos_, sequence(']', out);
    if (c == '(') return ++pos_, sequence(')', out);
    if (c == '{') {
      ++pos_;
      *out = json::object();
      while (!eat('}')) {
        json key, v;
        if (!value(&key) || !key.is_string() || !eat(':') || !value(&v)) return false;
        (*out)[key.get<std::string>()] = std::move(v);
        if (!next_item('}')) return false;
      }
      return true;
    }
    if (c == '-' || c == '+' || c == '.' || std::isdigit(uint8_t(c))) return number(out);
    const auto word = identifier();
    if (word == "True") return *out = true, true;
    if (word == "False") return *out = false, true;
    if (word == "None") return *out = nullptr, true;
    return false;
  }
  bool number(json* out) {
    const size_t start = pos_;
    if (s_[pos_] == '-' || s_[pos_] == '+') ++pos_;
    bool is_float = false;
    while (pos_ < s_.size() && (std::isdigit(uint8_t(s_[pos_])) || s_[pos_] == '.' || s_[pos_] == '_' ||
                                s_[pos_] == 'e' || s_[pos_] == 'E' ||
                                ((s_[pos_] == '-' || s_[pos_] == '+') && (s_[pos_ - 1] == 'e' || s_[pos_ - 1] == 'E')))) {
      is_float = is_float || s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E';
      ++pos_;
    }
    std::string text;
    for (size_t i = start; i < pos_; ++i) {
      if (s_[i] != '_' && s_[i] != '+') text += s_[i];
    }
    if (!is_float) {
      int64_t v = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec == std::errc() && end == text.data() + text.size()) return *out = v, true;
      return false;
    }
    const json parsed = json::parse(text.front() == '.' ? "0" + text : text.rfind("-.", 0) == 0 ? "-0" + text.substr(1) : text,
                                    nullptr, false);
    if (!parsed.is_number()) return false;
    *out = parsed;
    return true;
  }
  bool string(json* out) {
    const char quote = s_[pos_++];
    std::string v;
    while (pos_ < s_.size() && s_[pos_] != quote) {
      char c = s_[pos_++];
      if (c == '\n') return false;
      if (c != '\\') {
        v += c;
        continue;
      }
      if (pos_ >= s_.size()) return false;
      c = s_[pos_++];
      switch (c) {
        case 'n': v += '\n'; break;
        case 't': v += '\t'; break;
        case 'r': v += '\r'; break;
        case '0': v += '\0'; break;
        case '\\': case '\'': case '"': v += c; break;
        case 'u': case 'x': {
          const size_t digits = c == 'u' ? 4 : 2;
          if (pos_ + digits > s_.size()) return false;
          uint32_t code = 0;
          const auto [end, ec] = std::from_chars(s_.data() + pos_, s_.data() + pos_ + digits, code, 16);
          if (ec != std::errc() || end != s_.data() + pos_ + digits) return false;
          pos_ += digits;
          v += utf8_encode(code);
          break;
        }
        default: v += '\\', v += c;  // Python keeps unknown escapes as written
      }
    }
    if (pos_ >= s_.size()) return false;
    ++pos_;
    *out = std::move(v);
    return true;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

std::optional<std::vector<PythonCall>> parse_python_calls(std::string_view code) { return Reader(code).calls(); }

}  // namespace kestrel::server
