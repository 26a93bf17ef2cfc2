// Splits text into the "words" that byte-level BPE merges within, using the regular expressions of
// the model's tokenizer.ggml.pre (GPT-2, Llama 3, Qwen2, ...). Text that no expression matches is
// kept as a word of its own, so the words always concatenate back to the input.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kestrel::tokenizer {

class PreTokenizer {
 public:
  // Throws kestrel::Error for a `pre` name this engine does not know.
  static std::unique_ptr<PreTokenizer> for_pre(const std::string& pre);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the words of `text` (views into it) to `words`. Safe to call from several threads.
  void split(std::string_view text, std::vector<std::string_view>& words) const;

  // True for pre-tokenizers whose models map a word that is already a whole token straight to that
  // token instead of merging it piece by piece (Llama 3's ignore_merges).
  bool word_as_whole_token() const { return word_as_whole_token_; }

 private:
  struct CompiledPattern;
  PreTokenizer() = default;
  void add_pattern(const std::string& pattern);

  // Applied in order: each pattern splits the words the previous one produced.
  std::vector<std::unique_ptr<CompiledPattern>> patterns_;
  bool word_as_whole_token_ = false;
};

}  // namespace kestrel::tokenizer
