// A Mixture-of-Experts layer's weights as views into the memory-mapped GGUF: the router, the
// experts' stacked 3-D tensors (one expert's matrix is a view at an offset into its stack, never
// a copy) and the shared expert (Qwen2-MoE's with its sigmoid gate; DeepSeek-V2's ungated).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/model_config.h"

namespace kestrel::gguf {
class GgufFile;
}

namespace kestrel {

struct MoeLayerWeights {
  int64_t n_expert = 0;       // 0: not a MoE layer
  int64_t n_ff_expert = 0;    // each expert's FFN channels (under --tp: this rank's slice of them)
  int64_t n_embd = 0;         // the input's width (router, gate, up)
  int64_t n_out = 0;          // rows of each expert's down: n_embd (--tp-deterministic: this rank's rows)
  WeightView router;          // [n_expert][n_embd]                (blk.N.ffn_gate_inp)
  // GGUF stores each stack as [n_expert][rows][cols] (dims listed reversed: cols, rows, n_expert),
  // so expert e's rows are contiguous: rows [e * rows, (e + 1) * rows) of these 2-D views.
  WeightView gate_stack;      // [n_expert * n_ff_expert][n_embd]  (blk.N.ffn_gate_exps)
  WeightView up_stack;        // [n_expert * n_ff_expert][n_embd]  (blk.N.ffn_up_exps)
  WeightView down_stack;      // [n_expert * n_out][n_ff_expert]   (blk.N.ffn_down_exps)
  // Qwen2-MoE's shared expert, added to every token scaled by sigmoid(shared_gate_inp . h).
  WeightView shared_gate;     // [n_ff_shared][n_embd]             (blk.N.ffn_gate_shexp)
  WeightView shared_up;       // [n_ff_shared][n_embd]             (blk.N.ffn_up_shexp)
  WeightView shared_down;     // [n_out][n_ff_shared]              (blk.N.ffn_down_shexp)
  WeightView shared_gate_inp; // [1][n_embd], F32                  (blk.N.ffn_gate_inp_shexp); none: ungated (DeepSeek)
  // DeepSeek-V3's per-expert bias added to the scores for choosing experts, not for weighting them.
  const float* selection_bias = nullptr;  // [n_expert] or none    (blk.N.exp_probs_b.bias)

  bool has_experts() const { return n_expert > 0; }
  bool has_shared_expert() const { return shared_gate.data != nullptr; }
  // Expert e's matrices: [n_ff_expert][n_embd], [n_ff_expert][n_embd], [n_out][n_ff_expert].
  WeightView gate(int64_t e) const { return expert_rows(gate_stack, e, n_ff_expert); }
  WeightView up(int64_t e) const { return expert_rows(up_stack, e, n_ff_expert); }
  WeightView down(int64_t e) const { return expert_rows(down_stack, e, n_out); }

  static WeightView expert_rows(const WeightView& stack, int64_t e, int64_t rows);
};

// Whether layer `layer` of the file is a MoE layer (it has a router, blk.N.ffn_gate_inp.weight).
bool is_moe_layer(const gguf::GgufFile& file, const ModelConfig& c, int64_t layer);

// Views of layer `layer`'s router, expert stacks and (when the file has one; required for
// qwen2moe) shared expert. Every tensor's shape is checked against the config: a missing tensor, a
// stack whose expert count or matrix shape differs, or a type Kestrel has no kernels for is a
// kestrel::Error naming the file and the tensor. 1-D tensors stored in other types than F32 are
// converted into `owned_vectors`.
MoeLayerWeights load_moe_layer(const gguf::GgufFile& file, const ModelConfig& c, int64_t layer,
                               std::vector<std::vector<float>>& owned_vectors);

}  // namespace kestrel
