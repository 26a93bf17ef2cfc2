// kestrel bench MODEL --draft-model D | --spec ngram: speculative decoding against plain decoding
// on the same prompts, in one process. Each repetition runs every prompt plainly and then with
// speculation (greedy, --tg tokens); figures are medians of the decode rate (first token to last,
// prefill excluded), the speed-up the median of the pairwise ratios, and the acceptance over all
// runs. Prints whether the speculative output was identical to plain decoding's.
#pragma once

#include <string>

#include "spec_options.h"

namespace kestrel::cli {

struct SpecBenchOptions {
  std::string model;
  int threads = 0;
  int tg = 128;
  int reps = 3;
  std::string prompt_file;  // one prompt per paragraph (blank-line separated); default: built-in code tasks
  SpecOptions spec;
};

void bench_speculative(const SpecBenchOptions& o);

}  // namespace kestrel::cli
