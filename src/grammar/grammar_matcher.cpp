#include "grammar/grammar_matcher.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <string>

#include "core/error.h"
#include "grammar/compiled_grammar.h"

namespace kestrel::grammar {

struct GrammarMaskProcessor::Impl {
  explicit Impl(std::shared_ptr<const CompiledGrammar> g)
      : grammar(std::move(g)), matcher(grammar->compiled), bitmask(size_t(xgrammar::GetBitmaskSize(grammar->n_vocab))) {}
  std::shared_ptr<const CompiledGrammar> grammar;
  xgrammar::GrammarMatcher matcher;
  std::vector<TokenId> consumed;  // the generated tokens followed so far, in order
  size_t fed = 0;                 // of which the first `fed` were accepted by the matcher (the
                                  // rest came after a stop token)
  // consumed[unmatched_stop] is a stop token the matcher refused (the way out of a dead end);
  // npos: none. Like an accepted stop token, it ends matching.
  size_t unmatched_stop = std::string::npos;
  std::vector<int32_t> bitmask;   // bit t of word t/32: token t allowed
  bool mask_current = false;      // bitmask is the mask after `consumed` (set by fill_mask)

  bool ended() const { return unmatched_stop != std::string::npos || matcher.IsTerminated(); }
  bool is_stop(TokenId t) const {
    const std::vector<int>& stops = matcher.GetStopTokenIds();
    return std::find(stops.begin(), stops.end(), t) != stops.end();
  }
};

bool grammar_accepts(const CompiledGrammar& grammar, std::string_view text) {
  xgrammar::GrammarMatcher matcher(grammar.compiled);
  return matcher.AcceptString(std::string(text)) && matcher.IsCompleted();
}

GrammarMaskProcessor::GrammarMaskProcessor(std::shared_ptr<const CompiledGrammar> grammar, size_t prompt_length)
    : impl_(std::make_unique<Impl>(std::move(grammar))), prompt_length_(prompt_length) {}

GrammarMaskProcessor::~GrammarMaskProcessor() = default;

void GrammarMaskProcessor::sync(std::span<const TokenId> history) {
  if (history.size() < prompt_length_) fail("internal: a history of {} tokens is shorter than its prompt ({})", history.size(), prompt_length_);
  const std::span<const TokenId> generated = history.subspan(prompt_length_);
  std::vector<TokenId>& consumed = impl_->consumed;
  const size_t common = size_t(std::mismatch(consumed.begin(), consumed.end(), generated.begin(), generated.end()).first - consumed.begin());
  if (common < consumed.size() || common < generated.size()) impl_->mask_current = false;
  if (common < consumed.size()) {
    if (common < impl_->fed) {
      impl_->matcher.Rollback(int(impl_->fed - common));
      impl_->fed = common;
    }
    consumed.resize(common);
    if (impl_->unmatched_stop != std::string::npos && impl_->unmatched_stop >= common) impl_->unmatched_stop = std::string::npos;
  }
  for (size_t i = common; i < generated.size(); ++i) {
    consumed.push_back(generated[i]);
    // Rows past a stop token (drafts beyond it, verified in the same pass) are never output: the
    // request ends at the stop token. They are followed but not matched.
    if (impl_->ended()) continue;
    if (!impl_->matcher.AcceptToken(generated[i])) {
      if (impl_->is_stop(generated[i])) {  // a dead end's stop token (apply() let it through)
        impl_->unmatched_stop = i;
        continue;
      }
      fail("internal: token {} at output position {} is not allowed by the request's {} constraint", generated[i], i,
           constraint_kind_name(impl_->grammar->kind));
    }
    ++impl_->fed;
  }
}

void GrammarMaskProcessor::fill_mask() {
  if (impl_->mask_current) return;  // prepared, or filled by an earlier call on the same history
  impl_->mask_current = true;
  ++masks_computed_;
  std::vector<int32_t>& mask = impl_->bitmask;
  auto allow_only_stop_tokens = [&] {
    std::fill(mask.begin(), mask.end(), 0);
    for (const int t : impl_->matcher.GetStopTokenIds()) mask[size_t(t) / 32] |= int32_t(1u << (size_t(t) % 32));
  };
  dead_end_ = false;
  if (impl_->ended()) {
    // Past a stop token: only stop tokens (a well-formed row for a draft model to sample from).
    allow_only_stop_tokens();
    return;
  }
  DLTensor tensor{};
  int64_t shape = int64_t(mask.size());
  tensor.data = mask.data();
  tensor.device = DLDevice{kDLCPU, 0};
  tensor.ndim = 1;
  tensor.dtype = xgrammar::GetBitmaskDLType();
  tensor.shape = &shape;
  impl_->matcher.FillNextTokenBitmask(&tensor);
  // A dead end: the stop tokens are the way out (the engine reports it as an error).
  dead_end_ = std::all_of(mask.begin(), mask.end(), [](int32_t w) { return w == 0; });
  if (dead_end_) allow_only_stop_tokens();
}

void GrammarMaskProcessor::apply(std::span<float> logits, std::span<const TokenId> history) {
  if (logits.size() != size_t(impl_->grammar->n_vocab)) {
    fail("internal: a logits row of {} for a grammar over {} tokens", logits.size(), impl_->grammar->n_vocab);
  }
  sync(history);
  fill_mask();
  const std::vector<int32_t>& bits = impl_->bitmask;
  // Word by word: all allowed (most of the vocabulary inside a string) costs nothing, none allowed
  // (inside a number, a key) is one fill, a mixed word visits only its disallowed bits.
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const size_t n = logits.size();
  for (size_t w = 0; w * 32 < n; ++w) {
    const uint32_t allowed = uint32_t(bits[w]);
    if (allowed == 0xffffffffu) continue;
    float* row = logits.data() + w * 32;
    const size_t count = std::min<size_t>(32, n - w * 32);
    if (allowed == 0) {
      std::fill(row, row + count, kNegInf);
      continue;
    }
    uint32_t refused = ~allowed;
    if (count < 32) refused &= (1u << count) - 1u;
    while (refused != 0) {
      row[std::countr_zero(refused)] = kNegInf;
      refused &= refused - 1u;
    }
  }
}

void GrammarMaskProcessor::prepare(std::span<const TokenId> history) {
  sync(history);
  fill_mask();
}

bool GrammarMaskProcessor::at_dead_end() const { return dead_end_ || impl_->unmatched_stop != std::string::npos; }

std::vector<TokenId> GrammarMaskProcessor::allowed_tokens(std::span<const TokenId> history) {
  sync(history);
  fill_mask();
  std::vector<TokenId> allowed;
  for (size_t t = 0; t < size_t(impl_->grammar->n_vocab); ++t) {
    if ((uint32_t(impl_->bitmask[t / 32]) >> (t % 32)) & 1u) allowed.push_back(TokenId(t));
  }
  return allowed;
}

bool GrammarMaskProcessor::completed(std::span<const TokenId> history) {
  sync(history);
  return impl_->matcher.IsCompleted();
}

std::vector<TokenId> GrammarMaskProcessor::forced_tokens(std::span<const TokenId> history) {
  sync(history);
  const std::vector<int32_t> tokens = impl_->matcher.FindJumpForwardTokens();
  return {tokens.begin(), tokens.end()};
}

}  // namespace kestrel::grammar
