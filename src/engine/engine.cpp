#include "engine/engine.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"
#include "core/memory_info.h"

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

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.2f} {}", bytes, units[unit]);
}

// Activation memory a step of the config needs besides the weights and the KV cache (the forward
// pass's buffers for max_num_batched_tokens tokens, the matmul conversions and the logits).
int64_t scratch_bytes(const Model& model, const EngineConfig& config) {
  const ModelConfig& c = model.config();
  const int64_t tokens = config.max_num_batched_tokens;
  const int64_t per_token = 4 * c.n_embd + 2 * c.q_width() + 2 * c.kv_width() + 3 * c.n_ff;
  return int64_t(sizeof(float)) * (tokens * per_token + int64_t(config.max_num_seqs) * c.n_vocab);
}

}  // namespace

KvCacheSpec make_kv_spec(const Model& model, const EngineConfig& config) {
  KvCacheSpec spec = model.kv_spec(config.kv_type_k, config.kv_type_v, config.block_size);
  spec.rotate = config.kv_rotate;
  if (config.attention_sinks >= 0) {
    spec.rolling_window = config.max_model_len > 0 ? config.max_model_len : model.config().n_ctx_train;
    spec.sink_tokens = config.attention_sinks;
    if (!config.free_out_of_window_blocks) {
      fail("--keep-window-blocks cannot be combined with --attention-sinks: the rolling window frees "
           "the blocks it leaves behind");
    }
  }
  validate_kv_spec(spec);
  return spec;
}

std::string describe(const KvCapacity& k) {
  std::string s = fmt::format("KV cache: {}, {} per token, {} tokens ({} blocks of {}) in {}", k.spec.describe(),
                              human_bytes(double(k.bytes_per_token)), k.tokens, k.tokens / k.spec.block_size,
                              k.spec.block_size, human_bytes(double(k.bytes)));
  if (k.spec.rolling_window > 0) {
    s += fmt::format(", rolling window {} with {} attention sinks", k.spec.rolling_window, k.spec.sink_tokens);
  }
  if (k.available_bytes > 0) {
    s += fmt::format(" ({:.2f} of {} available, less weights and scratch)", k.fraction,
                     human_bytes(double(k.available_bytes)));
  }
  return s;
}

std::vector<int64_t> resolve_kv_group_blocks(const Model& model, const EngineConfig& config,
                                             KvCapacity* capacity) {
  const KvCacheSpec spec = make_kv_spec(model, config);
  const KvLayout layout = model.kv_layout(spec.rolling_window, spec.sink_tokens);
  const int num_groups = int(layout.group_windows.size());
  const int bs = config.block_size;
  const int64_t max_model_len = config.max_model_len > 0 ? config.max_model_len : model.config().n_ctx_train;
  // Bytes one block takes in each group: K and V of that group's layers.
  std::vector<int64_t> block_bytes(size_t(num_groups), 0);
  for (int g : layout.layer_group) block_bytes[size_t(g)] += spec.block_bytes();
  // A windowed group never needs more than a window (and its sinks) per sequence plus a chunk in
  // flight.
  auto windowed = [&](int g) { return layout.group_windows[size_t(g)] > 0 && (config.free_out_of_window_blocks || layout.group_sinks[size_t(g)] > 0); };
  auto window_cap = [&](int g) {
    const int window = layout.group_windows[size_t(g)], sinks = layout.group_sinks[size_t(g)];
    const int64_t per_seq = (sinks + bs - 1) / bs + (window - sinks - 1 + bs - 1) / bs + 2;
    return per_seq * config.max_num_seqs + (config.max_num_batched_tokens + bs - 1) / bs + 1;
  };
  std::vector<int64_t> blocks(size_t(num_groups), 0);
  int64_t budget = 0, available = 0;
  if (config.num_kv_blocks > 0) {
    for (int g = 0; g < num_groups; ++g) {
      blocks[size_t(g)] = windowed(g) ? std::min(config.num_kv_blocks, window_cap(g)) : config.num_kv_blocks;
    }
  } else {
    budget = config.kv_memory_bytes;
    int64_t full_cap = std::numeric_limits<int64_t>::max();
    if (budget <= 0) {
      if (!(config.kv_memory_fraction > 0.0 && config.kv_memory_fraction <= 1.0)) {
        fail("--kv-memory-fraction must be in (0, 1], got {}", config.kv_memory_fraction);
      }
      available = available_memory_bytes();
      const int64_t spare = available - model.weight_bytes() - scratch_bytes(model, config);
      budget = int64_t(config.kv_memory_fraction * double(std::max<int64_t>(0, spare)));
      // No more than max_num_seqs full contexts can use.
      full_cap = int64_t(config.max_num_seqs) * ((max_model_len + bs - 1) / bs) +
                 (config.max_num_batched_tokens + bs - 1) / bs;
      if (budget <= 0) {
        fail("no memory left for the KV cache: {} available, the weights take {} and the activations "
             "about {}; give --kv-memory-mib",
             human_bytes(double(available)), human_bytes(double(model.weight_bytes())),
             human_bytes(double(scratch_bytes(model, config))));
      }
    }
    // Windowed groups take what they can ever use (capped by an even split); full-attention
    // groups share the rest of the budget.
    int64_t all_bytes = 0;
    for (int64_t b : block_bytes) all_bytes += b;
    const int64_t even = budget / all_bytes;
    int64_t rest = budget;
    int64_t full_bytes = 0;
    for (int g = 0; g < num_groups; ++g) {
      if (windowed(g)) {
        blocks[size_t(g)] = std::min(even, window_cap(g));
        rest -= blocks[size_t(g)] * block_bytes[size_t(g)];
      } else {
        full_bytes += block_bytes[size_t(g)];  // shares the rest of the budget
      }
    }
    for (int g = 0; g < num_groups; ++g) {
      if (blocks[size_t(g)] == 0) blocks[size_t(g)] = std::min(rest / full_bytes, full_cap);
    }
    for (int g = 0; g < num_groups; ++g) {
      if (blocks[size_t(g)] < 1) {
        fail("a KV budget of {} holds no block of {} tokens ({} bytes each in group {})",
             human_bytes(double(budget)), bs, block_bytes[size_t(g)], g);
      }
    }
  }
  if (capacity != nullptr) {
    capacity->spec = spec;
    capacity->bytes = 0;
    for (int g : layout.layer_group) capacity->bytes += blocks[size_t(g)] * spec.block_bytes();
    capacity->bytes_per_token = int64_t(layout.layer_group.size()) * spec.token_bytes();
    capacity->tokens = blocks[0] * bs;
    capacity->budget_bytes = budget;
    capacity->available_bytes = available;
    capacity->fraction = available > 0 ? config.kv_memory_fraction : 0.0;
  }
  return blocks;
}

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
