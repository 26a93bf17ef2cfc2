// Sampling options shared by `run` and `chat`: --temp, --top-k, --top-p, --min-p,
// --repeat-penalty, --seed, with llama.cpp's defaults.
#pragma once

#include <cstdint>

#include <CLI/CLI.hpp>

#include "sample/sampling_params.h"

namespace kestrel::cli {

struct SamplingOptions {
  float temperature = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  int64_t seed = -1;  // -1: a random seed
};

void add_sampling_options(CLI::App& cmd, SamplingOptions& o);
// The options as SamplingParams; a seed of -1 becomes a random one.
SamplingParams make_sampling_params(const SamplingOptions& o);

}  // namespace kestrel::cli
