#include "cmd_bench_spec.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include <fmt/format.h>

#include "cli_checks.h"
#include "commands.h"
#include "core/error.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

using Clock = std::chrono::steady_clock;

const char* const kCodeTasks[] = {
    "Write a Python function that parses a CSV file and returns a list of dictionaries, converting integer and "
    "float fields. Include docstrings.",
    "Write a C function that reverses a singly linked list in place, with a small test in main().",
    "Write a Python class implementing an LRU cache with get and put in O(1), with type hints.",
};

std::vector<std::string> load_prompts(const SpecBenchOptions& o, const Tokenizer& tokenizer) {
  std::vector<std::string> prompts;
  if (!o.prompt_file.empty()) {
    const std::string text = read_input_file(o.prompt_file, "--prompt-file");
    std::string paragraph;
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find("\n\n", start);
      if (end == std::string::npos) end = text.size();
      paragraph = text.substr(start, end - start);
      if (paragraph.find_first_not_of(" \n\t") != std::string::npos) prompts.push_back(paragraph);
      start = end + 2;
    }
    if (prompts.empty()) fail("the prompt file {} holds no prompt", o.prompt_file);
    return prompts;
  }
  // ChatML where the vocabulary has it (Qwen), plain text otherwise.
  const bool chatml = tokenizer.find_token("<|im_start|>") >= 0;
  for (const char* task : kCodeTasks) {
    prompts.push_back(chatml ? fmt::format("<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n", task) : task);
  }
  return prompts;
}

struct Run {
  std::vector<TokenId> tokens;
  double rate = 0.0;  // tok/s from the first token to the last
};

Run generate(LLMEngine& engine, const std::vector<TokenId>& prompt, int tg) {
  RequestSpec spec;
  spec.prompt = prompt;
  spec.max_tokens = tg;
  spec.sampling.temperature = 0.0f;
  spec.ignore_eos = true;
  engine.add_request(spec);
  Run run;
  Clock::time_point first;
  while (engine.has_unfinished()) {
    for (const RequestOutput& out : engine.step()) {
      for (const SampleResult& s : out.new_tokens) {
        if (run.tokens.empty()) first = Clock::now();
        run.tokens.push_back(s.token);
      }
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - first).count();
  run.rate = run.tokens.size() > 1 && seconds > 0 ? double(run.tokens.size() - 1) / seconds : 0.0;
  return run;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

void bench_speculative(const SpecBenchOptions& o) {
  const auto model = Model::load(o.model);
  const auto tokenizer = Tokenizer::from_gguf(model->file());
  EngineConfig config;
  config.num_threads = o.threads > 0 ? o.threads : default_thread_count();
  config.max_model_len = std::min<int64_t>(model->config().n_ctx_train, 8192);
  config.max_num_seqs = 1;
  config.kv_memory_bytes = int64_t(256) << 20;
  LLMEngine plain(*model, config, tokenizer->stop_token_ids());
  std::unique_ptr<Model> draft;
  apply_spec_options(o.spec, *model, draft, config);
  if (!config.spec.enabled()) fail("kestrel bench: --draft-model or --spec ngram (with --spec-tokens > 0) is needed here");
  LLMEngine speculative(*model, config, tokenizer->stop_token_ids());

  const std::vector<std::string> texts = load_prompts(o, *tokenizer);
  std::vector<std::vector<TokenId>> prompts;
  for (const std::string& t : texts) prompts.push_back(tokenizer->encode(t, true, true));
  const bool subset_head = draft && config.spec.draft_head_is_subset(draft->config().n_vocab);
  fmt::print("speculative decoding: {}{}{}, up to {} drafts, {}; {} prompts x {} tokens, {} reps, {} threads\n",
             spec_method_name(config.spec.method), draft ? " (" + o.spec.draft_model + ")" : "",
             subset_head ? fmt::format(", draft head over {} tokens", config.spec.draft_vocab) : "",
             config.spec.num_spec_tokens, config.spec.adaptive ? "adaptive" : "fixed", prompts.size(), o.tg, o.reps,
             config.num_threads);
  std::vector<double> plain_rates, spec_rates, ratios;
  bool identical = true;
  for (int rep = 0; rep < o.reps; ++rep) {
    for (const auto& prompt : prompts) {
      const Run a = generate(plain, prompt, o.tg);
      const Run b = generate(speculative, prompt, o.tg);
      identical = identical && a.tokens == b.tokens;
      plain_rates.push_back(a.rate);
      spec_rates.push_back(b.rate);
      ratios.push_back(a.rate > 0 ? b.rate / a.rate : 0.0);
    }
  }
  const SpecStats& st = speculative.speculator()->stats();
  fmt::print("| decode | tok/s (median) |\n|---|---:|\n| plain | {:.2f} |\n| speculative | {:.2f} |\n",
             median(plain_rates), median(spec_rates));
  fmt::print("speed-up {:.2f}x (median of {} pairwise ratios); acceptance {:.1f}% ({} of {} drafts), {:.2f} tokens "
             "per verification; output {} plain decoding's\n",
             median(ratios), ratios.size(),
             st.num_draft_tokens > 0 ? 100.0 * double(st.num_accepted_tokens) / double(st.num_draft_tokens) : 0.0,
             st.num_accepted_tokens, st.num_draft_tokens, st.mean_acceptance_length(),
             identical ? "identical to" : "DIFFERENT from");
}

}  // namespace kestrel::cli
