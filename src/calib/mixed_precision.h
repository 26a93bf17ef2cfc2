// Mixed precision under a size budget (`kestrel quantize IN OUT auto --target-bpw B |
// --target-size GIB`): given, per tensor, the bytes and the expected cost (KL divergence from the
// base) of each candidate type, pick one type per tensor minimising the summed expected cost within
// the budget. Model-free: the engine measures the costs (engine/tensor_sensitivity.h).
//
// The cost model: a tensor's KLD when it alone is quantized grows linearly with the
// importance-weighted squared error of its weights (to first order the logits move linearly with
// the weight error, and KLD is quadratic in that move), and the tensors' costs add. So one measured
// KLD per tensor (at a probe type) and the weighted errors of every type give every cost:
// cost(t, T) = kld(t, probe) * error(t, T) / error(t, probe).
//
// The choice is a multiple-choice knapsack, solved as llama.cpp-style mixtures never are: each
// tensor's options reduced to their lower convex hull (bytes against cost), every tensor starting at
// its cheapest option, then upgrades taken in order of cost saved per byte while they fit (on
// convex hulls that greedy order is optimal up to the last upgrade that does not fit), then the
// budget left spent on whichever single change, hull or not, saves the most, until none fits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace kestrel::calib {

struct TypeOption {
  DType type;
  int64_t bytes;  // the tensor's size in this type
  double cost;    // expected KLD when this tensor alone takes the type
};

struct TensorOptions {
  std::string name;
  std::vector<TypeOption> options;  // any order; at least one
};

struct MixedPrecisionPlan {
  std::vector<DType> types;  // per tensor, in the order given
  int64_t bytes = 0;         // sum of the chosen options' bytes
  double cost = 0;           // sum of their expected costs
};

// Throws (with the smallest reachable size) when even the cheapest option of every tensor exceeds
// budget_bytes.
MixedPrecisionPlan plan_mixed_precision(const std::vector<TensorOptions>& tensors, int64_t budget_bytes);

// cost(t, T) from one probe: probe_kld * error / probe_error (0 when the probe error is 0).
double scaled_cost(double probe_kld, double probe_error, double error);

}  // namespace kestrel::calib
