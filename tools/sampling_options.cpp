#include "sampling_options.h"

#include <cstdint>
#include <random>

#include "cli_checks.h"
#include "core/error.h"

namespace kestrel::cli {

void add_sampling_options(CLI::App& cmd, SamplingOptions& o) {
  // The bounds SamplingParams::validate() enforces (top-p excludes 0), plus upper ends past which
  // a value is surely a typo: a temperature of 100 already samples all but uniformly.
  cmd.add_option("--temp", o.temperature, "temperature; 0 = greedy")->check(number_range(0.0, 100.0));
  cmd.add_option("--top-k", o.top_k, "top-k; 0 = off")->check(int_range(0, 1 << 24));
  cmd.add_option("--top-p", o.top_p, "top-p; 1 = off")->check(number_range(0.0, 1.0, Bound::Open));
  cmd.add_option("--min-p", o.min_p, "min-p; 0 = off")->check(number_range(0.0, 1.0));
  cmd.add_option("--repeat-penalty", o.repeat_penalty, "repetition penalty; 1 = off")
      ->check(number_range(0.0, 100.0, Bound::Open));
  cmd.add_option("--seed", o.seed, "RNG seed (default: random)")->check(int_range(-1, INT64_MAX));
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
