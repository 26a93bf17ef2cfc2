#include "engine/engine.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"

namespace kestrel {
namespace {

SchedulerConfig make_scheduler_config(const Model& model, const EngineConfig& config) {
  SchedulerConfig s;
  s.max_model_len = config.max_model_len > 0 ? config.max_model_len : model.config().n_ctx_train;
  s.max_num_seqs = config.max_num_seqs;
  s.max_num_batched_tokens = config.max_num_batched_tokens;
  s.policy = config.policy;
  s.streaming = config.attention_sinks >= 0;
  return s;
}

RunnerConfig make_runner_config(const Model& model, const EngineConfig& config, KvCapacity& capacity) {
  RunnerConfig r;
  r.num_threads = config.num_threads;
  r.kv = make_kv_spec(model, config);
  r.group_blocks = resolve_kv_group_blocks(model, config, &capacity);
  return r;
}

std::vector<KVCacheGroupSpec> make_kv_groups(const RunnerConfig& runner, const KvLayout& layout,
                                             const EngineConfig& config) {
  std::vector<KVCacheGroupSpec> groups;
  for (size_t g = 0; g < layout.group_windows.size(); ++g) {
    const bool frees = config.free_out_of_window_blocks || layout.group_sinks[g] > 0;
    groups.push_back({int32_t(runner.group_blocks[g]), frees ? layout.group_windows[g] : 0,
                      frees ? layout.group_sinks[g] : 0});
  }
  return groups;
}

}  // namespace

LLMEngine::LLMEngine(const Model& model, const EngineConfig& config, TokenId eos_token)
    : model_(model),
      eos_token_(eos_token),
      runner_config_(make_runner_config(model, config, kv_capacity_)),
      kv_(make_kv_groups(runner_config_, model.kv_layout(runner_config_.kv.rolling_window, runner_config_.kv.sink_tokens),
                         config),
          config.block_size, config.enable_prefix_caching),
      runner_(model, runner_config_),
      scheduler_(make_scheduler_config(model, config), kv_) {}

int64_t LLMEngine::max_request_tokens() const {
  int64_t tokens = max_model_len();
  if (scheduler_.config().streaming) return tokens;
  for (int g = 0; g < kv_.num_groups(); ++g) {
    if (kv_.group_window(g) == 0) tokens = std::min<int64_t>(tokens, int64_t(kv_.num_blocks(g)) * kv_.block_size());
  }
  return tokens;
}

RequestId LLMEngine::add_request(RequestSpec spec) {
  for (TokenId t : spec.prompt) {
    if (t < 0 || t >= model_.config().n_vocab) {
      fail("request rejected: token id {} is outside the vocabulary (size {})", t,
           model_.config().n_vocab);
    }
  }
  auto request = std::make_unique<Request>();
  if (spec.id != 0 && scheduler_.find(spec.id) != nullptr) {
    fail("internal: request id {} is already in use", spec.id);
  }
  request->id = spec.id != 0 ? spec.id : next_id_++;
  request->num_prompt_tokens = int64_t(spec.prompt.size());
  request->tokens = std::move(spec.prompt);
  request->max_tokens = spec.max_tokens;
  request->priority = spec.priority;
  request->eos_token = eos_token_;
  request->ignore_eos = spec.ignore_eos;
  request->prefix_source = spec.prefix_source;
  const RequestId id = request->id;
  scheduler_.add_request(std::move(request));
  samplers_.emplace(id, Sampler(spec.sampling));
  return id;
}

void LLMEngine::finish_request(RequestId id, FinishReason reason) {
  scheduler_.finish_request(id, reason);
  samplers_.erase(id);
  scheduler_.take_finished();
}

std::vector<RequestId> LLMEngine::finish_all(FinishReason reason) {
  std::vector<RequestId> ids = scheduler_.unfinished_ids();
  for (RequestId id : ids) finish_request(id, reason);
  return ids;
}

std::vector<RequestOutput> LLMEngine::step() {
  std::vector<RequestOutput> outputs;
  const SchedulerOutput plan = scheduler_.schedule();
  last_step_ = {plan.num_scheduled_tokens, int64_t(plan.scheduled.size()),
                int64_t(plan.preempted.size()), plan.admitted};
  if (plan.empty()) return outputs;

  std::vector<SequenceChunk> chunks;
  chunks.reserve(plan.scheduled.size());
  for (const ScheduledRequest& s : plan.scheduled) {
    SequenceChunk chunk;
    chunk.tokens = std::span<const TokenId>(s.request->tokens)
                       .subspan(size_t(s.num_computed_tokens), size_t(s.num_scheduled_tokens));
    chunk.start_position = s.num_computed_tokens;
    for (int g = 0; g < kv_.num_groups(); ++g) chunk.block_tables.push_back(kv_.block_table(s.request->id, g));
    chunk.logits_from = s.sample ? s.num_scheduled_tokens - 1 : -1;
    chunks.push_back(chunk);
  }
  const std::span<float> logits = runner_.execute(chunks);

  const int64_t n_vocab = model_.config().n_vocab;
  std::vector<TokenId> sampled;
  std::vector<SampleResult> results;
  size_t row = 0;
  for (const ScheduledRequest& s : plan.scheduled) {
    if (!s.sample) continue;
    Sampler& sampler = samplers_.at(s.request->id);
    SampleResult r = sampler.sample(logits.subspan(row * size_t(n_vocab), size_t(n_vocab)),
                                    s.request->tokens);
    sampled.push_back(r.token);
    results.push_back(std::move(r));
    ++row;
  }
  scheduler_.update_from_output(plan, sampled);

  size_t next = 0;
  for (const ScheduledRequest& s : plan.scheduled) {
    if (!s.sample) continue;
    RequestOutput out;
    out.id = s.request->id;
    out.new_tokens.push_back(std::move(results[next++]));
    out.num_prompt_tokens = s.request->num_prompt_tokens;
    out.num_output_tokens = s.request->num_output_tokens();
    out.num_cached_tokens = std::max<int64_t>(0, s.request->num_cached_tokens);
    out.finished = s.request->finished();
    out.finish_reason = s.request->finish_reason;
    outputs.push_back(std::move(out));
  }
  for (const auto& request : scheduler_.take_finished()) samplers_.erase(request->id);
  return outputs;
}

}  // namespace kestrel
