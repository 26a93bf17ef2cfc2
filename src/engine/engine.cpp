#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"
#include "spec/verify.h"

namespace kestrel {
namespace {

SchedulerConfig make_scheduler_config(const Model& model, const EngineConfig& config) {
  SchedulerConfig s;
  s.max_model_len = config.max_model_len > 0 ? config.max_model_len : model.config().n_ctx_train;
  s.max_num_seqs = config.max_num_seqs;
  s.max_num_batched_tokens = config.max_num_batched_tokens;
  s.policy = config.policy;
  s.streaming = config.attention_sinks >= 0;
  // Prompt scoring's rows per step: at most 64 Mi floats (256 MiB) of logits.
  s.max_prompt_logits = std::max<int64_t>(16, (int64_t(64) << 20) / std::max<int64_t>(1, model.config().n_vocab));
  return s;
}

}  // namespace

LLMEngine::LLMEngine(const Model& model, const EngineConfig& config, std::vector<TokenId> stop_tokens)
    : model_(model),
      stop_tokens_(std::move(stop_tokens)),
      runner_config_(make_runner_config(model, target_share_of_kv_budget(model, config), &kv_capacity_)),
      kv_(make_kv_groups(model, runner_config_, config), config.block_size, config.enable_prefix_caching),
      runner_(model, runner_config_),
      scheduler_(make_scheduler_config(model, config), kv_),
      jump_forward_(config.grammar_jump_forward),
      max_forced_tokens_(config.grammar_max_forced_tokens) {
  if (config.spec.enabled()) {
    speculator_ = std::make_unique<Speculator>(config.spec, model, config, runner_, kv_, kv_capacity_.tokens,
                                               stop_tokens_);
  }
}

LLMEngine::~LLMEngine() = default;

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
  request->stop_tokens = stop_tokens_;
  request->ignore_eos = spec.ignore_eos;
  request->prefix_source = spec.prefix_source;
  request->prompt_logprobs = spec.prompt_logprobs;
  const RequestId id = request->id;
  const std::string invalid = spec.sampling.validate();
  if (!invalid.empty()) fail("request rejected: {}", invalid);
  if (spec.grammar && spec.ignore_eos) {
    fail("request rejected: ignore_eos cannot be combined with a grammar (nothing may follow a complete output)");
  }
  const size_t prompt_length = request->tokens.size();
  const TokenId spec_first_token = request->tokens.empty() ? -1 : request->tokens.front();
  scheduler_.add_request(std::move(request));
  RequestState state{Sampler(spec.sampling), spec.speculate, nullptr, {}, spec.prompt_logprobs};
  if (spec.prompt_logprobs) {
    SampleResult first;  // nothing predicts the first token
    first.token = spec_first_token;
    first.logprob = std::numeric_limits<float>::quiet_NaN();
    state.prompt_logprobs.push_back(std::move(first));
  }
  if (spec.grammar) {
    auto mask = std::make_unique<grammar::GrammarMaskProcessor>(spec.grammar, prompt_length);
    state.grammar = mask.get();
    state.sampler.chain().add(std::move(mask));
  }
  states_.emplace(id, std::move(state));
  return id;
}

void LLMEngine::finish_request(RequestId id, FinishReason reason) {
  scheduler_.finish_request(id, reason);
  states_.erase(id);
  if (speculator_) speculator_->release(id);
  scheduler_.take_finished();
}

std::vector<RequestId> LLMEngine::finish_all(FinishReason reason) {
  std::vector<RequestId> ids = scheduler_.unfinished_ids();
  for (RequestId id : ids) finish_request(id, reason);
  return ids;
}

std::vector<TokenId> LLMEngine::produce(const ScheduledRequest& s, std::span<float> rows,
                                       std::vector<SampleResult>* samples) {
  Sampler& sampler = states_.at(s.request->id).sampler;
  if (s.num_draft_tokens == 0) {
    samples->push_back(sampler.sample(rows, s.request->tokens));
    return {samples->back().token};
  }
  // Without a speculator the drafts are a grammar's forced tokens (one-hot).
  std::span<const TokenDistribution> dists;
  if (speculator_) dists = speculator_->draft_dists(s.request->id);
  if (!dists.empty()) dists = dists.first(size_t(s.num_draft_tokens));
  const std::vector<TokenId> produced = verify_drafts(sampler, rows, s.request->tokens, s.request->draft_tokens, dists, samples);
  if (speculator_) speculator_->record(s.request->id, int(s.num_draft_tokens), int(produced.size()) - 1);
  return produced;
}

void LLMEngine::score_prompt(const ScheduledRequest& s, std::span<const float> rows) {
  RequestState& state = states_.at(s.request->id);
  if (!state.scores_prompt) return;
  const size_t n_vocab = size_t(model_.config().n_vocab);
  const int top_n = std::max(0, state.sampler.params().top_logprobs);
  for (int64_t r = 0; r < s.num_prompt_logits; ++r) {
    const int64_t predicted = s.num_computed_tokens + r + 1;  // the position this row predicts
    if (predicted != int64_t(state.prompt_logprobs.size())) continue;  // scored before a preemption
    SampleResult result;
    result.token = s.request->tokens[size_t(predicted)];
    compute_logprobs(rows.subspan(size_t(r) * n_vocab, n_vocab), result.token, top_n, &result);
    state.prompt_logprobs.push_back(std::move(result));
  }
}

void LLMEngine::attach_forced_drafts() {
  for (Request* r : scheduler_.running()) {
    r->draft_tokens.clear();
    if (r->num_tokens() - r->num_computed_tokens != 1) continue;  // not decoding
    RequestState& state = states_.at(r->id);
    if (state.grammar == nullptr || !state.speculate) continue;
    const int64_t cap = std::min<int64_t>(max_forced_tokens_, scheduler_.draft_limit(*r));
    if (cap <= 0) continue;
    std::vector<TokenId> forced = state.grammar->forced_tokens(r->tokens);
    if (int64_t(forced.size()) > cap) forced.resize(size_t(cap));
    r->draft_tokens = std::move(forced);
  }
}

std::vector<RequestOutput> LLMEngine::step() {
  std::vector<RequestOutput> outputs;
  if (!speculator_ && jump_forward_) attach_forced_drafts();
  if (speculator_) {
    speculator_->attach_drafts(scheduler_, [this](RequestId id) -> Sampler* {
      RequestState& state = states_.at(id);
      return state.speculate ? &state.sampler : nullptr;
    });
  }
  const SchedulerOutput plan = scheduler_.schedule();
  last_step_ = {plan.num_scheduled_tokens, int64_t(plan.scheduled.size()),
                int64_t(plan.preempted.size()), plan.admitted};
  if (plan.empty()) return outputs;

  // A chunk is the request's tokens from num_computed_tokens on, then its drafts.
  std::vector<std::vector<TokenId>> with_drafts(plan.scheduled.size());
  std::vector<SequenceChunk> chunks;
  chunks.reserve(plan.scheduled.size());
  for (size_t i = 0; i < plan.scheduled.size(); ++i) {
    const ScheduledRequest& s = plan.scheduled[i];
    SequenceChunk chunk;
    const std::span<const TokenId> known = std::span<const TokenId>(s.request->tokens)
                                               .subspan(size_t(s.num_computed_tokens),
                                                        size_t(s.num_scheduled_tokens - s.num_draft_tokens));
    if (s.num_draft_tokens > 0) {
      with_drafts[i].assign(known.begin(), known.end());
      with_drafts[i].insert(with_drafts[i].end(), s.request->draft_tokens.begin(), s.request->draft_tokens.end());
      chunk.tokens = with_drafts[i];
    } else {
      chunk.tokens = known;
    }
    chunk.start_position = s.num_computed_tokens;
    for (int g = 0; g < kv_.num_groups(); ++g) chunk.block_tables.push_back(kv_.block_table(s.request->id, g));
    const int64_t rows = s.num_logits + s.num_prompt_logits;
    chunk.logits_from = rows > 0 ? s.num_scheduled_tokens - rows : -1;
    chunks.push_back(chunk);
  }
  // The constrained requests' next-token masks on the helper thread while the forward pass runs:
  // sampling row 0 (history = the request's tokens) then only applies its mask.
  std::vector<std::pair<grammar::GrammarMaskProcessor*, std::span<const TokenId>>> masks;
  for (const ScheduledRequest& s : plan.scheduled) {
    grammar::GrammarMaskProcessor* g = states_.at(s.request->id).grammar;
    if (g != nullptr && s.samples()) masks.emplace_back(g, s.request->tokens);
  }
  struct WaitForMasks {  // also when the forward pass throws: the task reads `masks`
    BackgroundTask* task;
    ~WaitForMasks() {
      if (task == nullptr) return;
      try {
        task->wait();
      } catch (...) {
      }
    }
  } wait_for_masks{masks.empty() ? nullptr : &mask_prefetch_};
  if (!masks.empty()) {
    mask_prefetch_.start([&masks] {
      for (const auto& [g, history] : masks) g->prepare(history);
    });
  }
  const auto start = std::chrono::steady_clock::now();
  const std::span<float> logits = runner_.execute(chunks);
  if (wait_for_masks.task != nullptr) {
    wait_for_masks.task = nullptr;
    mask_prefetch_.wait();
  }

  const size_t n_vocab = size_t(model_.config().n_vocab);
  std::vector<std::vector<TokenId>> produced(plan.scheduled.size());
  std::vector<std::vector<SampleResult>> results(plan.scheduled.size());
  std::vector<int64_t> tokens_before(plan.scheduled.size());
  std::vector<std::string> errors(plan.scheduled.size());
  size_t row = 0;
  for (size_t i = 0; i < plan.scheduled.size(); ++i) {
    const ScheduledRequest& s = plan.scheduled[i];
    tokens_before[i] = s.request->num_tokens();
    if (s.num_prompt_logits > 0) {
      score_prompt(s, logits.subspan(row * n_vocab, size_t(s.num_prompt_logits) * n_vocab));
      row += size_t(s.num_prompt_logits);
    }
    if (!s.samples()) continue;
    produced[i] = produce(s, logits.subspan(row * n_vocab, size_t(s.num_logits) * n_vocab), &results[i]);
    row += size_t(s.num_logits);
    // A grammar dead end let only a stop token through: the request ends, as an error.
    const grammar::GrammarMaskProcessor* g = states_.at(s.request->id).grammar;
    if (g != nullptr && g->at_dead_end() && s.request->is_stop_token(produced[i].back())) {
      errors[i] = fmt::format("the output constraint allows no token after {} output tokens (a dead end of the grammar for this vocabulary)",
                              s.request->num_output_tokens() + int64_t(produced[i].size()) - 1);
    }
  }
  // The cost the speculative policy weighs: the forward and the sampling (or verification) of
  // its rows.
  if (speculator_) {
    speculator_->observe_step(plan.num_scheduled_tokens,
                              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  scheduler_.update_from_output(plan, produced);

  for (size_t i = 0; i < plan.scheduled.size(); ++i) {
    const ScheduledRequest& s = plan.scheduled[i];
    if (!s.samples()) continue;
    RequestOutput out;
    out.id = s.request->id;
    // What the scheduler kept (a stop token or the length limit may end an accepted run early).
    const size_t kept = size_t(s.request->num_tokens() - tokens_before[i]);
    results[i].resize(std::min(kept, results[i].size()));
    out.new_tokens = std::move(results[i]);
    if (RequestState& state = states_.at(s.request->id); state.scores_prompt && !out.new_tokens.empty()) {
      out.prompt_logprobs = std::move(state.prompt_logprobs);
      state.scores_prompt = false;
    }
    out.num_prompt_tokens = s.request->num_prompt_tokens;
    out.num_output_tokens = s.request->num_output_tokens();
    out.num_cached_tokens = std::max<int64_t>(0, s.request->num_cached_tokens);
    out.num_draft_tokens = s.request->num_draft_tokens;
    out.num_accepted_tokens = s.request->num_accepted_tokens;
    out.finished = s.request->finished();
    out.finish_reason = s.request->finish_reason;
    if (!errors[i].empty()) {
      out.finish_reason = FinishReason::Error;
      out.error = std::move(errors[i]);
    }
    outputs.push_back(std::move(out));
  }
  for (const auto& request : scheduler_.take_finished()) {
    states_.erase(request->id);
    if (speculator_) speculator_->release(request->id);
  }
  return outputs;
}

}  // namespace kestrel
