#include "sampling_options.h"

#include <random>

#include "core/error.h"

namespace kestrel::cli {

void add_sampling_options(CLI::App& cmd, SamplingOptions& o) {
  cmd.add_option("--temp", o.temperature, "temperature; 0 = greedy");
  cmd.add_option("--top-k", o.top_k, "top-k; 0 = off");
  cmd.add_option("--top-p", o.top_p, "top-p; 1 = off")->check(CLI::Range(0.0, 1.0));
  cmd.add_option("--min-p", o.min_p, "min-p; 0 = off")->check(CLI::Range(0.0, 1.0));
  cmd.add_option("--repeat-penalty", o.repeat_penalty, "repetition penalty; 1 = off");
  cmd.add_option("--seed", o.seed, "RNG seed (default: random)");
}

SamplingParams make_sampling_params(const SamplingOptions& o) {
  SamplingParams p;
  p.temperature = o.temperature;
  p.top_k = o.top_k;
  p.top_p = o.top_p;
  p.min_p = o.min_p;
  p.repetition_penalty = o.repeat_penalty;
  p.seed = o.seed >= 0 ? uint64_t(o.seed) : std::random_device{}();
  const std::string invalid = p.validate();
  if (!invalid.empty()) fail("{}", invalid);
  return p;
}

}  // namespace kestrel::cli
