// The definition behind grammar_compiler.h's opaque CompiledGrammar: xgrammar's compiled grammar.
// Only the grammar module's sources include this (the rest of Kestrel never sees xgrammar).
#pragma once

#include <xgrammar/xgrammar.h>

#include "grammar/constraint.h"

namespace kestrel::grammar {

class CompiledGrammar {
 public:
  CompiledGrammar(xgrammar::CompiledGrammar compiled, ConstraintKind kind, int32_t n_vocab)
      : compiled(std::move(compiled)), kind(kind), n_vocab(n_vocab) {}
  xgrammar::CompiledGrammar compiled;
  ConstraintKind kind;
  int32_t n_vocab;  // the logits row size the masks cover
};

}  // namespace kestrel::grammar
