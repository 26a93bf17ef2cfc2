#include "model/moe_ffn.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace kestrel {

namespace {

// Whether score a ranks above b: greater, or a number where b is NaN (a NaN ranks below every
// number, so it never wins over one; ties keep b, the lower index).
bool ranks_above(float a, float b) { return a > b || (std::isnan(b) && !std::isnan(a)); }

// The index of the largest of values[0, n) not yet taken (ties: the lower index; a NaN loses to
// any number), or -1 when every value is taken.
int64_t best_free(const float* values, const std::vector<bool>& taken, int64_t n) {
  int64_t best = -1;
  for (int64_t e = 0; e < n; ++e) {
    if (taken[size_t(e)]) continue;
    if (best < 0 || ranks_above(values[e], values[best])) best = e;
  }
  return best;
}

// Marks every expert outside the token's n_group_used best groups as taken (unavailable).
void exclude_groups(const float* selection, const MoeConfig& m, MoeRouting& r) {
  const int64_t per_group = m.n_expert / m.n_group;
  r.group_scores.resize(size_t(m.n_group));
  r.group_taken.assign(size_t(m.n_group), false);
  for (int64_t g = 0; g < m.n_group; ++g) {
    const float* v = selection + g * per_group;
    int64_t first = 0;
    for (int64_t e = 1; e < per_group; ++e) {
      if (ranks_above(v[e], v[first])) first = e;
    }
    float score = v[first];
    if (m.group_score == MoeConfig::GroupScore::TopTwoSum) {
      int64_t second = first == 0 ? 1 : 0;
      for (int64_t e = 0; e < per_group; ++e) {
        if (e != first && ranks_above(v[e], v[second])) second = e;
      }
      score += v[second];
    }
    r.group_scores[size_t(g)] = score;
  }
  for (int64_t j = 0; j < m.n_group_used; ++j) {
    const int64_t g = best_free(r.group_scores.data(), r.group_taken, m.n_group);
    r.group_taken[size_t(g)] = true;  // chosen: its experts stay available
  }
  for (int64_t e = 0; e < m.n_expert; ++e) r.taken[size_t(e)] = !r.group_taken[size_t(e / per_group)];
}

}  // namespace

void route_tokens(const float* logits, int64_t T, const MoeConfig& m, MoeRouting& r, const float* selection_bias) {
  const int64_t n = m.n_expert, k = m.n_expert_used;
  if (k < 1 || k > n) fail("internal: {} of {} experts per token", k, n);
  if (m.group_limited() && (n % m.n_group != 0 || k > m.n_group_used * (n / m.n_group))) {
    fail("internal: {} experts per token from {} of {} groups of {} experts", k, m.n_group_used, m.n_group, n);
  }
  r.n_tokens = T;
  r.k = k;
  r.experts.resize(size_t(T * k));
  r.weights.resize(size_t(T * k));
  std::vector<float>& p = r.probs;
  std::vector<float>& selection = r.selection;
  std::vector<bool>& taken = r.taken;
  p.resize(size_t(n));
  selection.resize(size_t(n));
  taken.resize(size_t(n));
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits + t * n;
    if (m.gating == MoeConfig::Gating::Sigmoid) {
      for (int64_t e = 0; e < n; ++e) p[size_t(e)] = 1.0f / (1.0f + std::exp(-l[e]));
    } else {
      float max = -std::numeric_limits<float>::infinity();
      for (int64_t e = 0; e < n; ++e) max = std::max(max, l[e]);
      float sum = 0.0f;
      for (int64_t e = 0; e < n; ++e) {
        p[size_t(e)] = std::exp(l[e] - max);
        sum += p[size_t(e)];
      }
      for (int64_t e = 0; e < n; ++e) p[size_t(e)] /= sum;
    }
    const float* choose_by = p.data();
    if (selection_bias != nullptr) {
      for (int64_t e = 0; e < n; ++e) selection[size_t(e)] = p[size_t(e)] + selection_bias[e];
      choose_by = selection.data();
    }
    // Top k by selection, in order: a strictly greater score wins, so on ties the lower index
    // comes first (deterministic); a NaN loses to any number, and among NaNs the lowest free index
    // is taken, so k distinct experts are always chosen. Experts outside the chosen groups start taken.
    if (m.group_limited()) {
      exclude_groups(choose_by, m, r);
    } else {
      std::fill(taken.begin(), taken.end(), false);
    }
    int32_t* chosen = r.experts.data() + t * k;
    float* weight = r.weights.data() + t * k;
    float chosen_sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t best = best_free(choose_by, taken, n);
      taken[size_t(best)] = true;
      chosen[j] = int32_t(best);
      weight[j] = p[size_t(best)];
      chosen_sum += weight[j];
    }
    // llama.cpp's floor on the sum (the smallest normal F16): sigmoid scores can all underflow.
    chosen_sum = std::max(chosen_sum, 6.103515625e-5f);
    for (int64_t j = 0; j < k; ++j) {
      if (m.normalize_top_k) weight[j] /= chosen_sum;
      weight[j] *= m.weights_scale;
    }
  }
}

void moe_ffn(Backend& backend, const MoeConfig& m, const MoeLayerWeights& w, GatedActivation act, const float* x,
             int64_t T, MoeScratch& s, float* out, LayerObserver seen) {
  const int64_t n_expert = w.n_expert, n_embd = w.n_embd, n_ff = w.n_ff_expert, n_out = w.n_out;
  if (n_expert != m.n_expert || T <= 0) fail("internal: MoE layer of {} experts for a config of {}", n_expert, m.n_expert);
  if (n_out <= 0 || n_out > n_embd) fail("internal: MoE layer with {} output rows of {}", n_out, n_embd);
  seen.observe(LinearKind::Router, x, T, n_embd);
  s.logits.resize(size_t(T * n_expert));
  backend.matmul(w.router, x, T, s.logits.data());
  route_tokens(s.logits.data(), T, m, s.routing, w.selection_bias);
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
  // step in one grouped call each. An observer sees each stack's inputs before the stack is read
  // (it may replace the stack: the groups take their views after it).
  s.rows_act.resize(size_t(T * k * n_ff));
  s.rows_out.resize(size_t(T * k * n_out));
  // fn(e, first row, rows) for each expert some token chose.
  auto each_chosen = [&](auto fn) {
    for (int64_t e = 0; e < n_expert; ++e) {
      const int64_t begin = s.expert_begin[size_t(e)], rows = s.expert_begin[size_t(e + 1)] - begin;
      if (rows > 0) fn(e, begin, rows);
    }
  };
  auto observe_experts = [&](LinearKind kind, const std::vector<float>& rows_in, int64_t cols) {
    if (!seen.observer) return;
    each_chosen([&](int64_t e, int64_t begin, int64_t rows) {
      seen.observe_stacked(kind, e, n_expert, rows_in.data() + begin * cols, rows, cols);
    });
    seen.end_stacked(kind, n_expert);
  };
  observe_experts(LinearKind::ExpertGate, s.rows_in, n_embd);
  observe_experts(LinearKind::ExpertUp, s.rows_in, n_embd);
  s.gated_groups.clear();
  each_chosen([&](int64_t e, int64_t begin, int64_t rows) {
    s.gated_groups.push_back({w.gate(e), w.up(e), s.rows_in.data() + begin * n_embd, rows,
                              s.rows_act.data() + begin * n_ff});
  });
  backend.gated_ffn_grouped(s.gated_groups, act);
  observe_experts(LinearKind::ExpertDown, s.rows_act, n_ff);
  s.down_groups.clear();
  each_chosen([&](int64_t e, int64_t begin, int64_t rows) {
    s.down_groups.push_back({w.down(e), s.rows_act.data() + begin * n_ff, rows, s.rows_out.data() + begin * n_out});
  });
  backend.matmul_grouped(s.down_groups);

  // Each token's weighted sum in its top-k order.
  const float* weights = s.routing.weights.data();
  for (int64_t t = 0; t < T; ++t) {
    float* o = out + t * n_out;
    for (int64_t j = 0; j < k; ++j) {
      const float wj = weights[t * k + j];
      const float* y = s.rows_out.data() + s.pair_row[size_t(t * k + j)] * n_out;
      if (j == 0) {
        for (int64_t i = 0; i < n_out; ++i) o[i] = wj * y[i];
      } else {
        for (int64_t i = 0; i < n_out; ++i) o[i] += wj * y[i];
      }
    }
  }

  if (!w.has_shared_expert()) return;
  const int64_t n_sh = w.shared_gate.rows;
  s.shared_act.resize(size_t(T * n_sh));
  s.shared_out.resize(size_t(T * n_out));
  s.shared_logit.resize(size_t(T));
  const bool gated = w.shared_gate_inp.data != nullptr;
  seen.observe(LinearKind::SharedGate, x, T, n_embd);
  seen.observe(LinearKind::SharedUp, x, T, n_embd);
  backend.gated_ffn(w.shared_gate, w.shared_up, act, x, T, s.shared_act.data());
  seen.observe(LinearKind::SharedDown, s.shared_act.data(), T, n_sh);
  backend.matmul(w.shared_down, s.shared_act.data(), T, s.shared_out.data());
  if (gated) {
    seen.observe(LinearKind::SharedGateInp, x, T, n_embd);
    backend.matmul(w.shared_gate_inp, x, T, s.shared_logit.data());
  }
  for (int64_t t = 0; t < T; ++t) {
    const float gate = gated ? 1.0f / (1.0f + std::exp(-s.shared_logit[size_t(t)])) : 1.0f;
    float* o = out + t * n_out;
    const float* y = s.shared_out.data() + t * n_out;
    for (int64_t i = 0; i < n_out; ++i) o[i] += gate * y[i];
  }
}

}  // namespace kestrel
