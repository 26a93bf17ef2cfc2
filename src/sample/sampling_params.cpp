#include "sample/sampling_params.h"

#include <cmath>

#include <fmt/format.h>

namespace kestrel {

std::string SamplingParams::validate() const {
  if (!std::isfinite(temperature) || temperature < 0.0f) {
    return fmt::format("temperature must be a number >= 0 (0 is greedy), got {}", temperature);
  }
  if (top_k < 0) return fmt::format("top_k must be >= 0 (0 is off), got {}", top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f)) return fmt::format("top_p must be in (0, 1], got {}", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return fmt::format("min_p must be in [0, 1], got {}", min_p);
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0f) {
    return fmt::format("repetition_penalty must be > 0 (1 is off), got {}", repetition_penalty);
  }
  if (!std::isfinite(frequency_penalty) || frequency_penalty < -2.0f || frequency_penalty > 2.0f) {
    return fmt::format("frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  }
  if (!std::isfinite(presence_penalty) || presence_penalty < -2.0f || presence_penalty > 2.0f) {
    return fmt::format("presence_penalty must be in [-2, 2], got {}", presence_penalty);
  }
  if (penalty_last_n < -1) return fmt::format("penalty_last_n must be >= -1 (-1 is all), got {}", penalty_last_n);
  if (top_logprobs < -1) return fmt::format("top_logprobs must be >= -1, got {}", top_logprobs);
  return "";
}

}  // namespace kestrel
