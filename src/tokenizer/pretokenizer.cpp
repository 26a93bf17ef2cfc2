#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <memory>

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/pretokenizer_kinds.h"

namespace kestrel::tokenizer {

struct PreTokenizer::CompiledPattern {
  pcre2_code* code = nullptr;
  ~CompiledPattern() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(const PreTokenizerKind& kind) : kind_(kind) {
  for (const std::string_view pattern : kind.patterns) add_pattern(pattern);
}

PreTokenizer::~PreTokenizer() = default;

std::unique_ptr<PreTokenizer> PreTokenizer::for_pre(const std::string& pre) {
  const PreTokenizerKind* kind = find_pre_tokenizer_kind(pre);
  if (kind == nullptr) {
    fail("unknown BPE pre-tokenizer '{}' (tokenizer.ggml.pre); supported: {}", pre,
         supported_names());
  }
  return std::unique_ptr<PreTokenizer>(new PreTokenizer(*kind));
}

std::string PreTokenizer::supported_names() { return pre_tokenizer_names(); }

bool PreTokenizer::word_as_whole_token() const { return kind_.ignore_merges; }
bool PreTokenizer::raw_utf8() const { return kind_.raw_utf8; }
bool PreTokenizer::newline_runs_as_tokens() const { return kind_.newline_runs_as_tokens; }

void PreTokenizer::add_pattern(std::string_view pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  // MATCH_INVALID_UTF: user text may contain invalid UTF-8; such bytes simply never match and end
  // up in the unmatched words, instead of making every match fail.
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error_code,
                                   &error_offset, nullptr);
  if (code == nullptr) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(error_code, message.data(), message.size());
    fail("pre-tokenizer pattern '{}' does not compile at offset {}: {}", pattern, error_offset,
         reinterpret_cast<const char*>(message.data()));
  }
  auto compiled = std::make_unique<CompiledPattern>();
  compiled->code = code;
  // JIT is an optional speed-up: when it is unavailable pcre2_match interprets the pattern.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  patterns_.push_back(std::move(compiled));
}

namespace {

// Splits one piece with one pattern: the matches, and the unmatched stretches between them. An
// empty match splits the piece where it is (SuperBPE's lookahead-only expression does nothing
// else), as llama.cpp's std::regex_iterator loop does. After an empty match the search retries at
// the same place for a non-empty match, then moves on one character (PCRE2's and std::regex's
// way of not finding the same empty match forever).
void split_with_pattern(const pcre2_code* code, pcre2_match_data* match_data, std::string_view piece,
                        std::vector<std::string_view>& out) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
  size_t word_start = 0;  // where the next word begins: everything before it is already out
  size_t pos = 0;
  uint32_t options = 0;
  while (pos <= piece.size()) {
    const int rc = pcre2_match(code, subject, piece.size(), pos, options, match_data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {
      if (options == 0) break;
      // No non-empty match where the empty one was: look again one character further on.
      if (pos >= piece.size()) break;
      pos += std::min(piece.size() - pos, utf8_sequence_length(uint8_t(piece[pos])));
      options = 0;
      continue;
    }
    if (rc < 0) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(rc, message.data(), message.size());
      fail("pre-tokenizer match failed: {}", reinterpret_cast<const char*>(message.data()));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data);
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (begin > word_start) out.push_back(piece.substr(word_start, begin - word_start));
    if (end > begin) out.push_back(piece.substr(begin, end - begin));
    word_start = end;
    pos = end;
    options = end == begin ? PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED : 0;
  }
  if (word_start < piece.size()) out.push_back(piece.substr(word_start));
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
