// A model's layer matrices re-encoded in memory in another type for one pass, then put back: for
// passes whose result depends on the activations alone (an importance matrix is the mean of the
// layers' squared inputs), where a type with faster prompt kernels (W8A8: one int32 dot per row and
// token) buys time at the cost of activations that differ slightly from the model's own. The
// token embedding (a lookup) keeps its encoding.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/large_buffer.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace kestrel {

class ComputeReencoding {
 public:
  // Encodes every dense layer matrix of `model` (q/k/v/o, gate/up/down) and an untied output head
  // in `type` by round to nearest and points the model at the copies. Matrices already in `type`, whose rows cannot hold
  // its blocks, or which the model cannot swap (fused, expert or latent-attention tensors) keep
  // their encoding. Throws for a type without weight kernels (the activation types Q8_1, Q8_K).
  ComputeReencoding(Model& model, DType type, ThreadPool& pool);
  // Points the model back at its own matrices.
  ~ComputeReencoding();
  ComputeReencoding(const ComputeReencoding&) = delete;
  ComputeReencoding& operator=(const ComputeReencoding&) = delete;

  int64_t reencoded() const { return int64_t(originals_.size()); }
  int64_t kept() const { return kept_; }

 private:
  Model& model_;
  std::vector<std::pair<std::string, WeightView>> originals_;
  std::vector<LargeBuffer> copies_;
  int64_t kept_ = 0;
};

}  // namespace kestrel
