#include "model/moe_ffn.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace kestrel {

void route_tokens(const float* logits, int64_t T, const MoeConfig& m, MoeRouting& r) {
  const int64_t n = m.n_expert, k = m.n_expert_used;
  if (k < 1 || k > n) fail("internal: {} of {} experts per token", k, n);
  r.n_tokens = T;
  r.k = k;
  r.experts.resize(size_t(T * k));
  r.weights.resize(size_t(T * k));
  std::vector<float>& p = r.probs;
  std::vector<bool>& taken = r.taken;
  p.resize(size_t(n));
  taken.resize(size_t(n));
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits + t * n;
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t e = 0; e < n; ++e) max = std::max(max, l[e]);
    float sum = 0.0f;
    for (int64_t e = 0; e < n; ++e) {
      p[size_t(e)] = std::exp(l[e] - max);
      sum += p[size_t(e)];
    }
    for (int64_t e = 0; e < n; ++e) p[size_t(e)] /= sum;
    // Top k by selection, in order: a strictly greater probability wins, so on ties the lower
    // index comes first (deterministic); a NaN never wins, and if nothing can, the lowest free
    // index is taken so k distinct experts are always chosen.
    std::fill(taken.begin(), taken.end(), false);
    int32_t* chosen = r.experts.data() + t * k;
    float* weight = r.weights.data() + t * k;
    float chosen_sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < n; ++e) {
        if (taken[size_t(e)]) continue;
        if (best < 0 || p[size_t(e)] > p[size_t(best)]) best = e;
      }
      taken[size_t(best)] = true;
      chosen[j] = int32_t(best);
      weight[j] = p[size_t(best)];
      chosen_sum += weight[j];
    }
    for (int64_t j = 0; j < k; ++j) {
      if (m.normalize_top_k) weight[j] /= chosen_sum;
      weight[j] *= m.weights_scale;
    }
  }
}

void moe_ffn(Backend& backend, const MoeConfig& m, const MoeLayerWeights& w, GatedActivation act, const float* x,
             int64_t T, MoeScratch& s, float* out) {
  const int64_t n_expert = w.n_expert, n_embd = w.n_embd, n_ff = w.n_ff_expert;
  if (n_expert != m.n_expert || T <= 0) fail("internal: MoE layer of {} experts for a config of {}", n_expert, m.n_expert);
  s.logits.resize(size_t(T * n_expert));
  backend.matmul(w.router, x, T, s.logits.data());
  route_tokens(s.logits.data(), T, m, s.routing);
  const int64_t k = s.routing.k;
  const int32_t* experts = s.routing.experts.data();

  // Group (token, choice) pairs by expert, tokens in ascending order within an expert.
  s.expert_begin.assign(size_t(n_expert + 1), 0);
  for (int64_t i = 0; i < T * k; ++i) ++s.expert_begin[size_t(experts[i]) + 1];
  for (int64_t e = 0; e < n_expert; ++e) s.expert_begin[size_t(e + 1)] += s.expert_begin[size_t(e)];
  s.expert_fill.assign(s.expert_begin.begin(), s.expert_begin.end() - 1);
  s.pair_row.resize(size_t(T * k));
  s.rows_in.resize(size_t(T * k * n_embd));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t row = s.expert_fill[size_t(experts[t * k + j])]++;
      s.pair_row[size_t(t * k + j)] = row;
      std::copy_n(x + t * n_embd, n_embd, s.rows_in.data() + row * n_embd);
    }
  }

  // Each chosen expert once, over its rows: gate/up + activation, then down, every expert of the
  // step in one grouped call each.
  s.rows_act.resize(size_t(T * k * n_ff));
  s.rows_out.resize(size_t(T * k * n_embd));
  s.gated_groups.clear();
  s.down_groups.clear();
  for (int64_t e = 0; e < n_expert; ++e) {
    const int64_t begin = s.expert_begin[size_t(e)], rows = s.expert_begin[size_t(e + 1)] - begin;
    if (rows == 0) continue;
    s.gated_groups.push_back({w.gate(e), w.up(e), s.rows_in.data() + begin * n_embd, rows,
                              s.rows_act.data() + begin * n_ff});
    s.down_groups.push_back({w.down(e), s.rows_act.data() + begin * n_ff, rows, s.rows_out.data() + begin * n_embd});
  }
  backend.gated_ffn_grouped(s.gated_groups, act);
  backend.matmul_grouped(s.down_groups);

  // Each token's weighted sum in its top-k order.
  const float* weights = s.routing.weights.data();
  for (int64_t t = 0; t < T; ++t) {
    float* o = out + t * n_embd;
    for (int64_t j = 0; j < k; ++j) {
      const float wj = weights[t * k + j];
      const float* y = s.rows_out.data() + s.pair_row[size_t(t * k + j)] * n_embd;
      if (j == 0) {
        for (int64_t i = 0; i < n_embd; ++i) o[i] = wj * y[i];
      } else {
        for (int64_t i = 0; i < n_embd; ++i) o[i] += wj * y[i];
      }
    }
  }

  if (!w.has_shared_expert()) return;
  const int64_t n_sh = w.shared_gate.rows;
  s.shared_act.resize(size_t(T * n_sh));
  s.shared_out.resize(size_t(T * n_embd));
  s.shared_logit.resize(size_t(T));
  backend.gated_ffn(w.shared_gate, w.shared_up, act, x, T, s.shared_act.data());
  backend.matmul(w.shared_down, s.shared_act.data(), T, s.shared_out.data());
  const bool gated = w.shared_gate_inp.data != nullptr;
  if (gated) backend.matmul(w.shared_gate_inp, x, T, s.shared_logit.data());
  for (int64_t t = 0; t < T; ++t) {
    const float gate = gated ? 1.0f / (1.0f + std::exp(-s.shared_logit[size_t(t)])) : 1.0f;
    float* o = out + t * n_embd;
    const float* y = s.shared_out.data() + t * n_embd;
    for (int64_t i = 0; i < n_embd; ++i) o[i] += gate * y[i];
  }
}

}  // namespace kestrel
