// log-softmax of one row of logits: log p(v) = logit(v) - max - log(sum exp(logit - max)), the max
// and the log of the sum kept in double (vocabularies are 32k-262k entries). The one definition
// shared by logprobs (Sampler) and perplexity / KL divergence (engine/perplexity).
#pragma once

#include <algorithm>
#include <cmath>
#include <span>

namespace kestrel {

struct LogSoftmax {
  double max = 0.0;
  double log_sum = 0.0;
  explicit LogSoftmax(std::span<const float> row) {
    max = *std::max_element(row.begin(), row.end());
    double sum = 0.0;
    for (float x : row) sum += std::exp(double(x) - max);
    log_sum = std::log(sum);
  }
  double log_p(float logit) const { return double(logit) - max - log_sum; }
};

}  // namespace kestrel
