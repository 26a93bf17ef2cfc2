// Greedy generation through one LLMEngine, shared by the real-model tests.
#pragma once

#include <algorithm>
#include <vector>

#include "engine/engine.h"

namespace kestrel::test {

struct GreedyRun {
  std::vector<std::vector<TokenId>> outputs;  // per prompt, in prompt order
  bool all_blocks_free = false;               // the engine gave every KV block back
};

// Every prompt is queued before the first step (so they batch together), EOS ignored;
// max_tokens[i] is prompt i's budget.
inline GreedyRun generate_greedy(const Model& model, std::vector<TokenId> stop_tokens, const EngineConfig& config,
                                 const std::vector<std::vector<TokenId>>& prompts,
                                 const std::vector<int>& max_tokens) {
  LLMEngine engine(model, config, std::move(stop_tokens));
  std::vector<RequestId> ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    RequestSpec spec;
    spec.prompt = prompts[i];
    spec.max_tokens = max_tokens[i];
    spec.sampling.temperature = 0.0f;
    spec.ignore_eos = true;
    ids.push_back(engine.add_request(spec));
  }
  GreedyRun run;
  run.outputs.resize(prompts.size());
  while (engine.has_unfinished()) {
    for (const RequestOutput& out : engine.step()) {
      const size_t index = size_t(std::find(ids.begin(), ids.end(), out.id) - ids.begin());
      for (const SampleResult& s : out.new_tokens) run.outputs[index].push_back(s.token);
    }
  }
  run.all_blocks_free = engine.kv().num_free_blocks() == engine.kv().num_blocks();
  return run;
}

}  // namespace kestrel::test
