#include "tokenizer/wpm_tokenizer.h"

#include <algorithm>

#include "core/utf8.h"
#include "tokenizer/unicode_class.h"

namespace kestrel::tokenizer {

namespace {

// The CJK ranges BERT splits into single-character words (llama.cpp's list, which follows the
// Hugging Face tokenizers crate, 0x2B920 included).
bool is_cjk_ideograph(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// One code point; an invalid or truncated sequence is U+FFFD for one byte, as in llama.cpp.
uint32_t next_codepoint(std::string_view text, size_t* consumed) {
  const uint32_t c = utf8_decode(text, consumed);
  return *consumed == 1 && uint8_t(text[0]) >= 0x80 ? 0xFFFD : c;
}

}  // namespace

WpmTokenizer::WpmTokenizer(VocabData vocab) : VocabTokenizer(std::move(vocab)) {
  for (const std::string& t : vocab_.tokens) max_token_bytes_ = std::max(max_token_bytes_, t.size());
}

std::vector<std::string> WpmTokenizer::split_words(std::string_view text) const {
  std::vector<std::string> words(1);
  for (size_t at = 0; at < text.size();) {
    size_t consumed = 0;
    uint32_t c = next_codepoint(text.substr(at), &consumed);
    at += consumed;
    if (vocab_.strip_accents) c = nfd_first(c);
    const CodepointClass cls = classify_codepoint(c);
    if (cls.whitespace) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    if (c == 0 || c == 0xFFFD || cls.control) continue;
    if (vocab_.strip_accents && cls.mark) continue;
    const std::string s = utf8_encode(vocab_.lowercase ? simple_lowercase(c) : c);
    if (cls.punctuation || (c < 0x7F && cls.symbol) || is_cjk_ideograph(c)) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = s;
      words.emplace_back();
    } else {
      words.back() += s;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

void WpmTokenizer::encode_text(std::string_view text, bool /*follows_special*/, std::vector<TokenId>& out) const {
  for (const std::string& word : split_words(text)) {
    const std::string marked = std::string(kSpaceMarker) + word;
    const std::string_view w = marked;
    const size_t before = out.size();
    for (size_t i = 0; i < w.size();) {
      bool matched = false;
      for (size_t j = std::min(w.size(), i + max_token_bytes_ + 1); j > i; --j) {
        const TokenId id = find_token(w.substr(i, j - i));
        if (id >= 0) {
          out.push_back(id);
          i = j;
          matched = true;
          break;
        }
      }
      if (!matched) {  // a position no token covers: the whole word is unknown
        out.resize(before);
        break;
      }
    }
    if (out.size() == before) out.push_back(vocab_.unk_id);
  }
}

std::string WpmTokenizer::token_to_piece(TokenId id, bool render_special) const {
  return marked_piece(id, render_special);
}

// llama.cpp's detokenize with clean_spaces, pass for pass (in place, as there): " ?" " !" " ."
// " ," lose the space; " ' " loses both; " 's" " 'm" " 're" " 've" lose theirs.
void WpmTokenizer::finish_decode(std::string& text) const {
  const auto pass = [&text](auto&& step) {
    const size_t n = text.size();
    size_t total = n ? 1 : 0;
    for (size_t i = 1; i < n; ++i) step(i, total, n);
    text.resize(total);
  };
  pass([&text](size_t i, size_t& total, size_t) {
    const char x = text[i];
    if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) --total;
    text[total++] = x;
  });
  pass([&text](size_t& i, size_t& total, size_t n) {
    const char x = text[i];
    if (x == '\'' && i + 1 < n && text[i - 1] == ' ' && text[i + 1] == ' ') {
      --total;
      text[++i] = '\0';
    }
    text[total++] = x;
  });
  pass([&text](size_t i, size_t& total, size_t n) {
    const char x = text[i];
    if (text[i - 1] == ' ' && x == '\'' && i + 1 < n) {
      const char x1 = text[i + 1];
      if (x1 == 's' || x1 == 'm') {
        --total;
      } else if (x1 != 't' && x1 != 'd' && i + 2 < n) {
        const char x2 = text[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) --total;
      }
    }
    text[total++] = x;
  });
}

}  // namespace kestrel::tokenizer
