#include "spec/verify.h"

#include <algorithm>

#include "core/error.h"

namespace kestrel {
namespace {

// norm(max(0, p - q)) into `out` (dense). When p and q agree everywhere (the residual is empty,
// which only rounding can make happen after a rejection), p itself.
void residual(const TokenDistribution& p, const TokenDistribution& q, size_t n_vocab, TokenDistribution* out) {
  out->token = -1;
  out->probs.assign(n_vocab, 0.0f);
  double total = 0.0;
  for (size_t v = 0; v < n_vocab; ++v) {
    const float r = std::max(0.0f, p.p(TokenId(v)) - q.p(TokenId(v)));
    out->probs[v] = r;
    total += r;
  }
  if (total <= 0.0) {
    for (size_t v = 0; v < n_vocab; ++v) out->probs[v] = p.p(TokenId(v));
    total = 1.0;
  }
  const float scale = float(1.0 / total);
  for (float& r : out->probs) r *= scale;
}

}  // namespace

std::vector<TokenId> verify_drafts(Sampler& sampler, std::span<float> rows, std::span<const TokenId> history,
                                   std::span<const TokenId> drafts, std::span<const TokenDistribution> draft_dists,
                                   std::vector<SampleResult>* samples) {
  const size_t k = drafts.size();
  if (rows.size() % (k + 1) != 0) fail("internal: {} logits for {} draft rows", rows.size(), k + 1);
  if (!draft_dists.empty() && draft_dists.size() != k) fail("internal: {} draft distributions for {} drafts", draft_dists.size(), k);
  const size_t n_vocab = rows.size() / (k + 1);
  std::vector<TokenId> seq(history.begin(), history.end());
  seq.reserve(seq.size() + k + 1);
  std::vector<TokenId> out;
  TokenDistribution p, r;
  std::vector<float> raw;
  for (size_t i = 0; i <= k; ++i) {
    const std::span<float> row = rows.subspan(i * n_vocab, n_vocab);
    if (sampler.wants_logprobs()) raw.assign(row.begin(), row.end());
    sampler.distribution(row, seq, &p);
    const int64_t position = int64_t(seq.size());
    TokenId token;
    bool accepted = false;
    if (i == k || draft_dists.empty()) {
      // The token plain decoding draws here; a one-hot draft is accepted if it is that token.
      token = draw_token(p, sampler.uniform(position));
      accepted = i < k && token == drafts[i];
    } else {
      const TokenDistribution& q = draft_dists[i];
      const float pd = p.p(drafts[i]), qd = q.p(drafts[i]);
      if (qd <= 0.0f) fail("internal: draft token {} has probability 0 under its own distribution", drafts[i]);
      accepted = sampler.uniform(position, 1) < double(pd) / double(qd);
      if (accepted) {
        token = drafts[i];
      } else {
        residual(p, q, n_vocab, &r);
        token = draw_token(r, sampler.uniform(position, 2));
      }
    }
    out.push_back(token);
    if (samples != nullptr) {
      SampleResult sample;
      sample.token = token;
      if (sampler.wants_logprobs()) sampler.fill_logprobs(raw, token, &sample);
      samples->push_back(std::move(sample));
    }
    if (!accepted) break;
    seq.push_back(token);
  }
  return out;
}

}  // namespace kestrel
