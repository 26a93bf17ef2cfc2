// Splits text into the "words" that byte-level BPE merges within, using the regular expressions of
// the model's tokenizer.ggml.pre (GPT-2, Llama 3, Qwen2, DeepSeek, Falcon, ... every value
// llama.cpp knows; pretokenizer_kinds.cpp holds the table). Text that no expression matches is
// kept as a word of its own, so the words always concatenate back to the input.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kestrel::tokenizer {

struct PreTokenizerKind;

class PreTokenizer {
 public:
  // Throws kestrel::Error for a `pre` name this engine does not know, naming it and listing the
  // known ones. An empty name means "default", as in llama.cpp.
  static std::unique_ptr<PreTokenizer> for_pre(const std::string& pre);
  // Every tokenizer.ggml.pre value for_pre accepts, comma-separated (for error messages).
  static std::string supported_names();
  // Whether llama.cpp adds BOS for this pre when the file does not say (tokenizer.ggml.add_bos_token
  // absent); false for unknown names.
  static bool adds_bos_by_default(std::string_view pre);

  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the words of `text` (views into it) to `words`. Safe to call from several threads.
  void split(std::string_view text, std::vector<std::string_view>& words) const;

  // True for pre-tokenizers whose models map a word that is already a whole token straight to that
  // token instead of merging it piece by piece (llama.cpp's ignore_merges: Llama 3, Tekken, ...).
  bool word_as_whole_token() const;
  // True for SentencePiece-style BPE (Gemma 4, Sarvam): tokens are raw UTF-8 with U+2581 for a
  // space, not GPT-2's byte alphabet, and bytes fall back to <0xNN> tokens. The text's spaces are
  // written as U+2581 before splitting.
  bool raw_utf8() const;
  // Gemma 4: a word made only of newlines that is itself a token becomes that token.
  bool newline_runs_as_tokens() const;

 private:
  struct CompiledPattern;
  explicit PreTokenizer(const PreTokenizerKind& kind);
  void add_pattern(std::string_view pattern);

  const PreTokenizerKind& kind_;
  // Applied in order: each pattern splits the words the previous one produced.
  std::vector<std::unique_ptr<CompiledPattern>> patterns_;
};

}  // namespace kestrel::tokenizer
