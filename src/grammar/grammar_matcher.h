// A request's grammar in the sampler: the processor that sets the logits of the tokens the grammar
// does not allow next to -inf, before temperature and truncation (so the distribution sampled is
// the model's, renormalised over the allowed tokens: top-k and top-p see only allowed tokens).
//
// The matcher follows the history it is given rather than being told what was accepted: each
// apply() compares the generated part of `history` with the tokens the matcher has consumed,
// rolls back the ones that differ and accepts the new ones. So the same processor serves plain
// decoding, a draft model's rows (history = tokens + drafts so far) and speculative verification
// (row i sees drafts d_1..d_i), and rejected drafts are undone without the engine's help.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar_compiler.h"
#include "sample/logits_processors.h"

namespace kestrel::grammar {

// Whether `text` is a complete output of `grammar` (e.g. a tool call's arguments against the
// function's parameters schema).
bool grammar_accepts(const CompiledGrammar& grammar, std::string_view text);

class GrammarMaskProcessor final : public LogitsProcessor {
 public:
  // `prompt_length`: the history's first tokens that are the prompt (not matched).
  GrammarMaskProcessor(std::shared_ptr<const CompiledGrammar> grammar, size_t prompt_length);
  ~GrammarMaskProcessor() override;

  // logits [n_vocab]: disallowed tokens become -inf. A history the grammar cannot follow (never
  // produced by a masked sampler) is a kestrel::Error. A dead end (the grammar allows no token of
  // this vocabulary, e.g. a character no token spells) allows only the stop tokens, so the request
  // ends, and at_dead_end() says so (also for later rows that follow that stop token) until the
  // history moves back before that point.
  void apply(std::span<float> logits, std::span<const TokenId> history) override;
  bool at_dead_end() const;
  // Computes the mask that follows `history` ahead of apply() with that history (which then only
  // applies it): the engine runs it while the forward pass runs, on another thread. Not
  // concurrently with any other call on this processor.
  void prepare(std::span<const TokenId> history);
  // How many masks were computed (xgrammar's fill), for tests.
  int64_t masks_computed() const { return masks_computed_; }

  // The allowed next tokens after `history` (for tests and diagnostics), ascending.
  std::vector<TokenId> allowed_tokens(std::span<const TokenId> history);
  // True when the output so far is complete (only a stop token may follow).
  bool completed(std::span<const TokenId> history);
  // Tokens the grammar forces next (jump-forward): what must follow whatever the model does,
  // greedily tokenized; empty if the next character is not forced.
  std::vector<TokenId> forced_tokens(std::span<const TokenId> history);

 private:
  void sync(std::span<const TokenId> history);
  // The next-token mask into impl_->bitmask: the grammar's, or only the stop tokens past a stop
  // token or at a dead end (which sets dead_end_).
  void fill_mask();

  struct Impl;
  std::unique_ptr<Impl> impl_;
  size_t prompt_length_;
  bool dead_end_ = false;  // the grammar allowed no token in the last mask
  int64_t masks_computed_ = 0;
};

}  // namespace kestrel::grammar
