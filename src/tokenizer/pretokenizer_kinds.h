// The table of BPE pre-tokenizers: every tokenizer.ggml.pre value llama.cpp (as vendored by
// llama-cpp-python 0.3.36) knows, with the regular expressions it splits text with and the
// per-name flags it sets beside them (src/llama-vocab.cpp). Only data; PreTokenizer runs it.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace kestrel::tokenizer {

struct PreTokenizerKind {
  std::span<const std::string_view> names;     // the tokenizer.ggml.pre values
  std::span<const std::string_view> patterns;  // PCRE2 expressions, applied in order
  bool ignore_merges = false;  // a word that is a whole token becomes that token (Llama 3, ...)
  bool add_bos = false;        // BOS is added when tokenizer.ggml.add_bos_token is absent
  bool force_bos = false;      // BOS is added even when the file says not to (Gemma 4)
  bool raw_utf8 = false;       // SentencePiece-style BPE: raw UTF-8 tokens, spaces as U+2581
  bool newline_runs_as_tokens = false;  // a word of only newlines may be one token (Gemma 4)
};

// nullptr for a name that is not in the table. An empty name is "default".
const PreTokenizerKind* find_pre_tokenizer_kind(std::string_view name);

// Every name in the table, comma-separated.
std::string pre_tokenizer_names();

}  // namespace kestrel::tokenizer
