// Mixture-of-Experts hyper-parameters (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, DeepSeek-V2/V3): how many experts a MoE
// layer has, how many each token uses, and how the router's scores become expert weights.
#pragma once

#include <cstdint>
#include <string>

namespace kestrel::gguf {
class GgufFile;
}

namespace kestrel {

struct MoeConfig {
  int64_t n_expert = 0;        // `<arch>.expert_count`; 0: a dense model
  int64_t n_expert_used = 0;   // `<arch>.expert_used_count`: experts per token (top-k)
  int64_t n_ff_expert = 0;     // one expert's intermediate size
  int64_t n_ff_shared = 0;     // the shared expert's intermediate size (Qwen2-MoE, DeepSeek-V2); 0: none
  bool shared_gated = true;    // the shared expert's output scaled by a sigmoid gate (Qwen2-MoE; not DeepSeek)
  // Routing: scores = softmax(router logits) over all experts, or sigmoid(logits) per expert
  // (DeepSeek-V3); an expert is chosen by its score plus the layer's selection bias (DeepSeek-V3's
  // exp_probs_b; none elsewhere), the top n_expert_used kept (ties: the lower expert index), and
  // weighted by its unbiased score, divided by the chosen scores' sum when normalize_top_k
  // (Mixtral, Qwen3-MoE, DeepSeek-V3; transformers' norm_topk_prob), then multiplied by
  // weights_scale.
  enum class Gating { Softmax, Sigmoid };
  Gating gating = Gating::Softmax;
  bool normalize_top_k = true;
  float weights_scale = 1.0f;
  // Group-limited routing (DeepSeek-V2 236B, DeepSeek-V3): the experts form n_group groups of
  // consecutive indices and a token chooses only among the n_group_used best groups. A group's score
  // is its best expert's selection score (DeepSeek-V2's group_limited_greedy, softmax gating) or
  // the sum of its best two (DeepSeek-V3's noaux_tc, sigmoid gating). n_group_used == n_group:
  // every expert may be chosen.
  enum class GroupScore { Max, TopTwoSum };
  int64_t n_group = 1;
  int64_t n_group_used = 1;
  GroupScore group_score = GroupScore::Max;

  bool group_limited() const { return n_group > 1 && n_group_used < n_group; }

  bool enabled() const { return n_expert > 0; }
};

// The MoE keys of `arch` (`<arch>.expert_count`, `expert_used_count`, `expert_feed_forward_length`,
// `expert_shared_feed_forward_length`, `expert_weights_norm`, `expert_weights_scale`,
// `expert_gating_func`, `expert_group_count`, `expert_group_used_count`), with each architecture's
// defaults where llama.cpp's converter writes no key: Mixtral's experts are feed_forward_length wide
// and renormalized; Qwen2-MoE does not renormalize and has a shared expert; Qwen3-MoE renormalizes;
// OLMoE does not; DeepSeek-V2 does not and has expert_shared_count ungated shared experts
// (DeepSeek-V3 writes its sigmoid gating and renormalization). n_ff is `<arch>.feed_forward_length`.
// Inconsistent values are errors naming the file and key; a dense file gives a disabled config.
MoeConfig read_moe_config(const gguf::GgufFile& file, const std::string& arch, int64_t n_ff);

}  // namespace kestrel
