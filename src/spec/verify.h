// Verification of a request's drafts against the target model's logits, exact for greedy and for
// sampling. Row i of the target's logits (i = 0..k) predicts the token after the request's
// tokens and drafts d_1..d_i; every row goes through the request's processor chain with that
// history (penalties see the accepted drafts, as plain decoding would).
//
// One-hot drafts (n-gram, greedy draft model): the token plain decoding would draw at the
// position (Sampler::uniform is keyed by position) is computed; the draft is accepted if it is
// that token, and otherwise that token is the output. This is rejection sampling with a one-hot q
// (accepted with probability p(d); on rejection the token follows norm(max(0, p - q))) and gives
// the very tokens plain decoding gives, greedy or seeded sampling alike.
// Drafts drawn from a distribution q: accepted with probability min(1, p(d) / q(d)); on the first
// rejection the token is drawn from norm(max(0, p - q)); when all k are accepted a bonus token is
// drawn from row k (Leviathan et al. 2023, Chen et al. 2023).
#pragma once

#include <span>
#include <vector>

#include "sample/sampler.h"

namespace kestrel {

// `rows` is [k + 1][n_vocab] (modified in place), `history` the request's tokens, `drafts` its k
// drafts, `draft_dists` their q distributions (empty: one-hot). Returns 1 to k + 1 tokens: the
// accepted drafts, then the token sampled after them; `samples` gets one SampleResult each (with
// logprobs under the raw row when the request asks for them).
std::vector<TokenId> verify_drafts(Sampler& sampler, std::span<float> rows, std::span<const TokenId> history,
                                   std::span<const TokenId> drafts, std::span<const TokenDistribution> draft_dists,
                                   std::vector<SampleResult>* samples);

}  // namespace kestrel
