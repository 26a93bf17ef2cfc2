// How a speculating engine drafts: the method, the longest draft, and the adaptive policy's knobs.
#pragma once

#include <cstdint>
#include <string>

namespace kestrel {

class Model;

enum class SpecMethod { None, Ngram, DraftModel };

struct SpecConfig {
  SpecMethod method = SpecMethod::None;
  const Model* draft_model = nullptr;  // with DraftModel (not owned; same vocabulary as the target)
  int num_spec_tokens = 4;             // K: the most drafts per request and step; 0 turns speculation off
  int ngram_min = 2;                   // n-gram lookup tries match lengths ngram_max .. ngram_min
  int ngram_max = 4;
  // Measure and decide (per-request acceptance, start-up cost model); false: every request that
  // speculates gets as many drafts as it can have, every step (tests, benchmarks of the mechanism).
  bool adaptive = true;
  // Requests that sample draw the draft model's tokens from its distribution (rejection sampling);
  // otherwise the draft's most likely token (then output is exactly plain decoding's, seed for seed).
  bool sample_drafts = false;
  // The draft model's head covers only the vocabulary's `draft_vocab` most frequent tokens (and
  // the stop tokens): a cheaper draft step, drafts outside the set never made (spec/draft_head.h).
  // 0 or at least the vocabulary's size: the whole vocabulary.
  int64_t draft_vocab = 32768;

  bool enabled() const { return method != SpecMethod::None && num_spec_tokens > 0; }
  // Whether a draft model of `n_vocab` tokens drafts over part of its vocabulary only.
  bool draft_head_is_subset(int64_t n_vocab) const { return draft_vocab > 0 && draft_vocab < n_vocab; }
};

const char* spec_method_name(SpecMethod method);
// "ngram", "draft" (or "none"); a clear error for anything else.
SpecMethod parse_spec_method(const std::string& name);

}  // namespace kestrel
