#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <memory>

#include "core/error.h"
#include "core/utf8.h"

namespace kestrel::tokenizer {

namespace {

// The expressions, by family. They are the split patterns of the models' Hugging Face
// tokenizer.json; case-insensitive contractions are spelled out as [sS] etc. because PCRE's
// Unicode case folding would also fold characters such as U+017F (long s) onto 's'.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

constexpr const char* kLlama3Pattern =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen2 differs from Llama 3 only in taking digits one at a time.
constexpr const char* kQwen2Pattern =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// What llama.cpp applies to a BPE vocab whose pre-tokenizer is "default" (or missing): punctuation
// runs first, then GPT-2's expression, then digit runs, then groups of three ASCII digits.
constexpr std::array<const char*, 4> kDefaultPatterns = {
    R"([\p{P}\$\+<=>\^~\|]+)",
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))",
    R"(\p{N}+)",
    R"([0-9][0-9][0-9])",
};

bool is_one_of(const std::string& name, std::initializer_list<const char*> names) {
  for (const char* candidate : names) {
    if (name == candidate) return true;
  }
  return false;
}

}  // namespace

struct PreTokenizer::CompiledPattern {
  pcre2_code* code = nullptr;
  ~CompiledPattern() { pcre2_code_free(code); }
};

PreTokenizer::~PreTokenizer() = default;

std::unique_ptr<PreTokenizer> PreTokenizer::for_pre(const std::string& pre) {
  std::unique_ptr<PreTokenizer> result(new PreTokenizer());
  if (pre.empty() || pre == "default") {
    for (const char* pattern : kDefaultPatterns) result->add_pattern(pattern);
  } else if (is_one_of(pre, {"gpt-2", "phi-2", "mpt", "olmo", "jina-es", "jina-de", "jina-v2-es",
                             "jina-v2-de"})) {
    result->add_pattern(kGpt2Pattern);
  } else if (is_one_of(pre, {"llama-bpe", "llama3", "llama-v3", "dbrx", "smaug-bpe"})) {
    result->add_pattern(kLlama3Pattern);
    // Only the Llama 3 names themselves: llama.cpp sets ignore_merges for them, not for DBRX/Smaug.
    result->word_as_whole_token_ = is_one_of(pre, {"llama-bpe", "llama3", "llama-v3"});
  } else if (is_one_of(pre, {"qwen2", "deepseek-r1-qwen", "stablelm2"})) {
    result->add_pattern(kQwen2Pattern);
  } else {
    fail("unknown BPE pre-tokenizer '{}' (tokenizer.ggml.pre); supported: default, gpt-2, "
         "llama-bpe (llama3), qwen2 and their aliases",
         pre);
  }
  return result;
}

void PreTokenizer::add_pattern(const std::string& pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  // MATCH_INVALID_UTF: user text may contain invalid UTF-8; such bytes simply never match and end
  // up in the unmatched words, instead of making every match fail.
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error_code,
                                   &error_offset, nullptr);
  if (code == nullptr) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(error_code, message.data(), message.size());
    fail("pre-tokenizer pattern does not compile at offset {}: {}", error_offset,
         reinterpret_cast<const char*>(message.data()));
  }
  auto compiled = std::make_unique<CompiledPattern>();
  compiled->code = code;
  // JIT is an optional speed-up: when it is unavailable pcre2_match interprets the pattern.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  patterns_.push_back(std::move(compiled));
}

namespace {

// Splits one piece with one pattern: the matches, and the unmatched stretches between them.
void split_with_pattern(const pcre2_code* code, pcre2_match_data* match_data, std::string_view piece,
                        std::vector<std::string_view>& out) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
  size_t unmatched_start = 0;
  size_t pos = 0;
  while (pos < piece.size()) {
    const int rc = pcre2_match(code, subject, piece.size(), pos, 0, match_data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(rc, message.data(), message.size());
      fail("pre-tokenizer match failed: {}", reinterpret_cast<const char*>(message.data()));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data);
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (end == begin) {
      if (begin >= piece.size()) break;
      // An empty match splits nothing; step over one character so the loop always advances.
      pos = std::min(piece.size(), begin + utf8_sequence_length(uint8_t(piece[begin])));
      continue;
    }
    if (begin > unmatched_start) out.push_back(piece.substr(unmatched_start, begin - unmatched_start));
    out.push_back(piece.substr(begin, end - begin));
    pos = unmatched_start = end;
  }
  if (unmatched_start < piece.size()) out.push_back(piece.substr(unmatched_start));
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};

}  // namespace

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& words) const {
  if (text.empty()) return;
  std::vector<std::string_view> current{text};
  std::vector<std::string_view> next;
  for (const auto& pattern : patterns_) {
    std::unique_ptr<pcre2_match_data, MatchDataDeleter> match_data(
        pcre2_match_data_create_from_pattern(pattern->code, nullptr));
    next.clear();
    for (const std::string_view piece : current) {
      split_with_pattern(pattern->code, match_data.get(), piece, next);
    }
    current.swap(next);
  }
  words.insert(words.end(), current.begin(), current.end());
}

}  // namespace kestrel::tokenizer
