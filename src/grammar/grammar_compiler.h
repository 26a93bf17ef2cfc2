// Compiles a request's Constraint into a grammar over the model's vocabulary, on xgrammar
// (Apache-2.0; built from its pinned source package, cmake/xgrammar): JSON Schema, regex and
// Lark are converted to a context-free grammar, and for each of its states the tokens that are
// always or never allowed are precomputed (xgrammar's adaptive token-mask cache), so a mask at
// run time only runs the matcher on the few context-dependent tokens. Compiled grammars are
// cached by constraint (same schema, same grammar object), so a client that sends one schema
// with every request pays the compilation once.
// compile() may be called from several threads at once (the server's request threads).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "grammar/constraint.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::grammar {

// A compiled constraint: shared, immutable, used by any number of matchers (grammar_matcher.h).
class CompiledGrammar;

class GrammarCompiler {
 public:
  // `n_vocab` is the model's logits row size (at least the tokenizer's: ids beyond it are never
  // allowed). `stop_tokens` end generation: the grammar allows them exactly when its output is
  // complete. Control tokens (no text) are never allowed otherwise. `max_threads` bound the
  // threads a compilation uses.
  GrammarCompiler(const Tokenizer& tokenizer, int32_t n_vocab, std::vector<TokenId> stop_tokens,
                  int max_threads = 2);
  ~GrammarCompiler();
  GrammarCompiler(const GrammarCompiler&) = delete;
  GrammarCompiler& operator=(const GrammarCompiler&) = delete;

  // A constraint that cannot be compiled (malformed schema, regex or grammar; an unsupported
  // feature; an empty choice list) is a kestrel::Error that says why.
  std::shared_ptr<const CompiledGrammar> compile(const Constraint& constraint) const;

  int32_t n_vocab() const { return n_vocab_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int32_t n_vocab_;
};

// The EBNF grammar that matches exactly one of `choices` (string literals, escaped).
std::string choice_grammar(const std::vector<std::string>& choices);

}  // namespace kestrel::grammar
