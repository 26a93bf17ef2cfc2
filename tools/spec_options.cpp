#include "spec_options.h"

#include <cstdio>

#include "cli_checks.h"
#include "core/error.h"
#include "spec/draft_model_drafter.h"

namespace kestrel::cli {

void add_spec_options(CLI::App& cmd, SpecOptions& o) {
  cmd.add_option("--draft-model", o.draft_model,
                 "speculative decoding with this draft model (GGUF; the target's vocabulary, smaller)");
  cmd.add_option("--spec", o.method, "speculative decoding: draft (needs --draft-model), ngram (prompt lookup) or none")
      ->check(CLI::IsMember({"draft", "ngram", "none"}));
  cmd.add_option("--spec-tokens", o.spec_tokens, "the most draft tokens per step (0: speculation off)")
      ->check(int_range(0, 32));
  cmd.add_option("--spec-ngram-min", o.ngram_min, "shortest n-gram prompt lookup matches")->check(int_range(1, 64));
  cmd.add_option("--spec-ngram-max", o.ngram_max, "longest n-gram prompt lookup matches")->check(int_range(1, 64));
  cmd.add_flag("--spec-fixed", o.fixed,
               "always draft --spec-tokens tokens (default: the adaptive policy decides per step from "
               "measured costs and acceptance)");
  cmd.add_flag("--spec-sample-drafts", o.sample_drafts,
               "requests that sample draw the draft model's tokens from its distribution (rejection "
               "sampling) instead of taking its most likely token");
  cmd.add_option("--draft-vocab", o.draft_vocab,
                 "the draft model computes logits for the vocabulary's N most frequent tokens only (and "
                 "the stop tokens, and every token it has been fed): a cheaper draft step where the "
                 "vocabulary is large; 0: every token")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
}

void apply_spec_options(const SpecOptions& o, const Model& target, std::unique_ptr<Model>& draft, EngineConfig& config) {
  SpecConfig& s = config.spec;
  s.method = !o.method.empty() ? parse_spec_method(o.method)
                               : (!o.draft_model.empty() ? SpecMethod::DraftModel : SpecMethod::None);
  s.num_spec_tokens = o.spec_tokens;
  s.ngram_min = o.ngram_min;
  s.ngram_max = o.ngram_max;
  s.adaptive = !o.fixed;
  s.sample_drafts = o.sample_drafts;
  s.draft_vocab = o.draft_vocab;
  if (o.ngram_min > o.ngram_max) fail("--spec-ngram-min ({}) is larger than --spec-ngram-max ({})", o.ngram_min, o.ngram_max);
  if (s.method == SpecMethod::DraftModel && o.draft_model.empty()) fail("--spec draft needs --draft-model PATH");
  if (s.method != SpecMethod::DraftModel && !o.draft_model.empty()) {
    fail("--draft-model is given but --spec is {}", spec_method_name(s.method));
  }
  if (!s.enabled()) {
    s.method = SpecMethod::None;
    return;
  }
  if (s.method == SpecMethod::DraftModel) {
    try {
      draft = Model::load(o.draft_model);
    } catch (const Error& e) {
      fail("draft model: {}", e.what());
    }
    const std::string warning = check_draft_model(target, *draft);
    if (!warning.empty()) std::fprintf(stderr, "warning: %s\n", warning.c_str());
    s.draft_model = draft.get();
  }
}

}  // namespace kestrel::cli
