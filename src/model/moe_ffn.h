// A Mixture-of-Experts FFN block (Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2) on the backend's kernels:
//   logits = h . router^T                 [T][n_expert]
//   p = softmax(logits) (or sigmoid(logits), DeepSeek-V3); the top k experts per token by p + bias
//   (DeepSeek-V3's selection bias; ties: the lower index), among the best groups only where routing
//   is group-limited; their weights p_j (/ sum p_j when normalize_top_k) * weights_scale
//   out[t] = sum_j w[t][j] * down_e(act(gate_e h_t) * up_e h_t)   over the token's experts e = e[t][j]
//          [+ [sigmoid(shared_gate_inp . h_t) *] shared_down(act(shared_gate h_t) * shared_up h_t)]
// The step's tokens are grouped by expert: each chosen expert runs once, over the rows of the
// tokens that chose it gathered contiguous, and reads only its own slice of the stacked weights,
// so a decode step reads k experts' weights, not n_expert's. Each token's terms are then added in
// its own top-k order: with the backend's per-row matmul contract (a row's result does not depend
// on the batch), a token's output is bitwise the same alone or in any batch.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/activation_observer.h"
#include "model/moe_config.h"
#include "model/moe_weights.h"

namespace kestrel {

// The experts each token uses and their weights, top-k order (highest probability first).
struct MoeRouting {
  int64_t n_tokens = 0;
  int64_t k = 0;
  std::vector<int32_t> experts;  // [n_tokens][k]
  std::vector<float> weights;    // [n_tokens][k]
  // Working space for one token:
  std::vector<float> probs;         // [n_expert] its softmax or sigmoid scores
  std::vector<float> selection;     // [n_expert] scores + selection bias
  std::vector<bool> taken;          // [n_expert] experts chosen or out of its groups
  std::vector<float> group_scores;  // [n_group]
  std::vector<bool> group_taken;    // [n_group] groups chosen
};

// Routes T tokens from their router logits [T][m.n_expert] (gating, groups, top-k, normalization).
// selection_bias: [m.n_expert] added to the scores for choosing only, or null.
void route_tokens(const float* logits, int64_t T, const MoeConfig& m, MoeRouting& routing,
                  const float* selection_bias = nullptr);

// Buffers reused across layers and steps (grown as needed, never shrunk).
struct MoeScratch {
  std::vector<float> logits;        // [T][n_expert]
  MoeRouting routing;
  std::vector<int64_t> expert_begin;  // [n_expert + 1]: expert e's rows are [begin[e], begin[e+1])
  std::vector<int64_t> expert_fill;   // [n_expert]: the next free row of each expert while grouping
  std::vector<int64_t> pair_row;      // [T][k]: the grouped row of token t's j-th expert
  std::vector<float> rows_in;       // [T * k][n_embd]   token rows grouped by expert
  std::vector<float> rows_act;      // [T * k][n_ff_expert]   act(gate) * up, grouped like rows_in
  std::vector<float> rows_out;      // [T * k][n_out]    each expert's output for its rows
  std::vector<float> shared_act;    // [T][n_ff_shared]
  std::vector<float> shared_out;    // [T][n_out]
  std::vector<float> shared_logit;  // [T]
  std::vector<GatedFfnGroup> gated_groups;  // one per chosen expert
  std::vector<MatmulGroup> down_groups;
};

// out[T][n_out] = the MoE block over x[T][n_embd] (RMSNorm'd hidden states; n_out is n_embd, or
// under tensor parallelism this rank's output rows, and each expert's FFN channels may be this
// rank's slice of them: then `out` is a partial sum the ranks add). `act` is the
// experts' gated activation. With an observer, every matrix's input is shown before it is read:
// the router's and the shared experts' as whole batches, each chosen expert's rows by
// observe_stacked (gate and up: the tokens routed to it; down: their act(gate) * up).
void moe_ffn(Backend& backend, const MoeConfig& m, const MoeLayerWeights& w, GatedActivation act, const float* x,
             int64_t T, MoeScratch& s, float* out, LayerObserver seen = {});

}  // namespace kestrel
