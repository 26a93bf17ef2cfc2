// Speculative-decoding options shared by run, chat, serve, batch and bench: --draft-model PATH or
// --spec ngram, --spec-tokens K, the n-gram lengths, and the adaptive policy's switch.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "engine/engine_config.h"
#include "model/model.h"

namespace kestrel::cli {

struct SpecOptions {
  std::string draft_model;  // --draft-model: a smaller model with the target's vocabulary
  std::string method;       // --spec: ngram, draft, none (default: draft with --draft-model, else none)
  int spec_tokens = 4;      // --spec-tokens: the most drafts per step; 0 turns speculation off
  int ngram_min = 2;
  int ngram_max = 4;
  bool fixed = false;       // --spec-fixed: always draft K tokens (no cost model, no acceptance tracking)
  bool sample_drafts = false;
  int64_t draft_vocab = 32768;  // --draft-vocab: the draft head's most frequent tokens (0: all)
};

void add_spec_options(CLI::App& cmd, SpecOptions& o);
// Fills config.spec; loads the draft model into `draft` when one is used (the same errors as
// the target's load, prefixed "draft model"). Prints a warning when the draft is not smaller.
void apply_spec_options(const SpecOptions& o, const Model& target, std::unique_ptr<Model>& draft, EngineConfig& config);

}  // namespace kestrel::cli
