// Per-request sampling settings (the OpenAI / vLLM set, plus llama.cpp's min_p and
// repetition-penalty window).
#pragma once

#include <cstdint>
#include <string>

namespace kestrel {

struct SamplingParams {
  float temperature = 0.8f;         // 0 means greedy (argmax)
  int top_k = 0;                    // 0 = off
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off
  float repetition_penalty = 1.0f;  // 1 = off; divides positive logits, multiplies negative ones
  float frequency_penalty = 0.0f;   // subtracted once per previous occurrence
  float presence_penalty = 0.0f;    // subtracted once if the token occurred at all
  int penalty_last_n = 64;          // how many recent tokens the penalties look at; -1 = all
  uint64_t seed = 0;                // RNG seed: same seed and inputs give the same tokens
  int top_logprobs = -1;            // -1: no logprobs; 0: the sampled token's only; n: plus top n

  bool greedy() const { return temperature <= 0.0f; }
  // Why these settings are invalid, or "" if they are valid (the CLI and the server report it):
  // temperature < 0 or not finite, top_k < 0, top_p outside (0, 1], min_p outside [0, 1],
  // repetition_penalty <= 0, penalties not finite, penalty_last_n < -1, top_logprobs < -1.
  std::string validate() const;
};

}  // namespace kestrel
