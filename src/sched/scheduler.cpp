#include "sched/scheduler.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"

namespace kestrel {
namespace {

bool runs_before(const Request* a, const Request* b) {
  return a->priority != b->priority ? a->priority < b->priority : a->arrival_order < b->arrival_order;
}

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config, KVCacheManager& kv) : config_(config), kv_(kv) {
  if (config.max_num_batched_tokens <= 0 || config.max_num_seqs <= 0 || config.max_model_len <= 1) {
    fail("scheduler limits must be positive (max_num_batched_tokens {}, max_num_seqs {}, "
         "max_model_len {})",
         config.max_num_batched_tokens, config.max_num_seqs, config.max_model_len);
  }
}

std::string Scheduler::check_capacity(int64_t num_prompt_tokens, int64_t max_tokens) const {
  if (num_prompt_tokens <= 0) return "the prompt is empty";
  if (config_.streaming) {
    // The window rolls: memory is bounded whatever the length, positions are int32.
    if (max_tokens < 1) return fmt::format("max_tokens must be at least 1, got {}", max_tokens);
    constexpr int64_t kMaxPositions = int64_t(1) << 31;
    if (num_prompt_tokens + max_tokens > kMaxPositions) {
      return fmt::format("the prompt ({} tokens) plus max_tokens ({}) is more than {} positions",
                         num_prompt_tokens, max_tokens, kMaxPositions);
    }
    return kv_.check_fits(num_prompt_tokens + max_tokens - 1, config_.max_num_batched_tokens);
  }
  if (num_prompt_tokens >= config_.max_model_len) {
    return fmt::format("the prompt has {} tokens, but the context holds {} tokens (prompt plus at "
                       "least one generated token)",
                       num_prompt_tokens, config_.max_model_len);
  }
  if (max_tokens < 1) return fmt::format("max_tokens must be at least 1, got {}", max_tokens);
  if (num_prompt_tokens + max_tokens > config_.max_model_len) {
    return fmt::format("the prompt ({} tokens) plus max_tokens ({}) is more than the context length "
                       "{}",
                       num_prompt_tokens, max_tokens, config_.max_model_len);
  }
  // The last generated token is never fed back, so the cache needs prompt + max_tokens - 1 slots.
  return kv_.check_fits(num_prompt_tokens + max_tokens - 1, config_.max_num_batched_tokens);
}

void Scheduler::add_request(std::unique_ptr<Request> request) {
  const std::string problem = check_capacity(request->num_prompt_tokens, request->max_tokens);
  if (!problem.empty()) fail("request rejected: {}", problem);
  if (request->num_prompt_tokens != request->num_tokens()) {
    fail("internal: a new request must hold only its prompt");
  }
  if (requests_.count(request->id) != 0) fail("internal: duplicate request id {}", request->id);
  request->arrival_order = next_arrival_++;
  request->status = RequestStatus::Waiting;
  Request* raw = request.get();
  requests_.emplace(raw->id, std::move(request));
  enqueue_waiting(raw);
}

void Scheduler::enqueue_waiting(Request* request) {
  const auto pos = std::upper_bound(waiting_.begin(), waiting_.end(), request, runs_before);
  waiting_.insert(pos, request);
}

bool Scheduler::waits_for_prefix_source(const Request& request) const {
  if (request.prefix_source == 0) return false;
  const Request* source = find(request.prefix_source);
  if (source == nullptr) return false;  // finished or unknown: nothing to wait for
  // Wait while the source is still computing the prompt's full blocks.
  const int64_t shared = request.num_prompt_tokens / kv_.block_size() * kv_.block_size();
  return source->status == RequestStatus::Running && source->num_computed_tokens < shared;
}

Request* Scheduler::pick_preemption_victim() const {
  // The request that would run last: lowest priority, newest arrival.
  return *std::max_element(running_.begin(), running_.end(), runs_before);
}

void Scheduler::preempt(Request* request, SchedulerOutput& output) {
  running_.erase(std::find(running_.begin(), running_.end(), request));
  kv_.free(request->id);
  request->num_computed_tokens = 0;
  request->draft_tokens.clear();
  request->status = RequestStatus::Preempted;
  ++request->num_preemptions;
  ++num_preemptions_;
  output.preempted.push_back(request->id);
  enqueue_waiting(request);
}

namespace {

// A prompt-scoring request's chunk is capped while it still computes prompt positions.
int64_t chunk_limit(const Request& request, int64_t computed, int64_t budget, int64_t max_prompt_logits) {
  if (!request.prompt_logprobs || computed >= request.num_prompt_tokens - 1) return budget;
  return std::min(budget, max_prompt_logits);
}

int64_t prompt_rows(const Request& request, int64_t computed, int64_t num_new) {
  if (!request.prompt_logprobs) return 0;
  return std::max<int64_t>(0, std::min(computed + num_new, request.num_prompt_tokens - 1) - computed);
}

}  // namespace

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput output;
  int64_t budget = config_.max_num_batched_tokens;

  // 1. Running requests: the next chunk of an unfinished prefill, or one decode token and the
  //    request's drafts.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* request = running_[i];
    const int64_t computed = request->num_computed_tokens;
    const int64_t remaining = request->num_tokens() - computed;
    const int64_t num_new = std::min(remaining, chunk_limit(*request, computed, budget, config_.max_prompt_logits));
    int64_t drafts = 0;
    if (num_new == remaining) {
      drafts = std::min({int64_t(request->draft_tokens.size()), budget - num_new, draft_limit(*request)});
    }
    // Lookahead slots are taken only from free blocks: drafts never preempt anyone.
    if (drafts > 0 && !kv_.allocate_slots(request->id, computed + num_new + drafts, nullptr, computed)) drafts = 0;
    request->draft_tokens.resize(size_t(drafts));
    bool scheduled = true;
    while (drafts == 0 && !kv_.allocate_slots(request->id, computed + num_new, nullptr, computed)) {
      Request* victim = pick_preemption_victim();
      // A victim already scheduled this step must be unscheduled before its blocks are freed.
      auto it = std::find_if(output.scheduled.begin(), output.scheduled.end(),
                             [&](const ScheduledRequest& s) { return s.request == victim; });
      if (it != output.scheduled.end()) {
        budget += it->num_scheduled_tokens;
        output.num_scheduled_tokens -= it->num_scheduled_tokens;
        output.scheduled.erase(it);
        --i;  // the victim sat before index i in running_
      }
      preempt(victim, output);
      if (victim == request) {
        scheduled = false;
        break;
      }
    }
    if (!scheduled) continue;  // running_[i] is now the next request
    const bool reaches_end = computed + num_new == request->num_tokens();
    output.scheduled.push_back({request, computed, num_new + drafts, drafts, reaches_end ? 1 + drafts : 0,
                                prompt_rows(*request, computed, num_new)});
    output.num_scheduled_tokens += num_new + drafts;
    budget -= num_new + drafts;
    ++i;
  }

  // 2. Waiting requests, unless this step had to preempt (then memory is short: let running
  //    requests drain first). The static policy admits only into an empty batch.
  const bool may_admit = output.preempted.empty() &&
                         (config_.policy == SchedulingPolicy::Continuous || running_.empty());
  while (may_admit && !waiting_.empty() && budget > 0 &&
         int(running_.size()) < config_.max_num_seqs) {
    Request* request = waiting_.front();
    if (waits_for_prefix_source(*request)) break;
    // Reuse every cached full block of the tokens (never the last token: it must be computed to
    // give logits). A preempted request finds its own blocks again if they were not evicted.
    // A prompt-scoring request computes every position: it needs each one's logits.
    const CachedPrefix prefix = request->prompt_logprobs
                                    ? CachedPrefix{}
                                    : kv_.find_cached_prefix(std::span<const TokenId>(request->tokens)
                                                                 .first(size_t(request->num_tokens() - 1)));
    const int64_t num_new = std::min(request->num_tokens() - prefix.num_tokens,
                                     chunk_limit(*request, prefix.num_tokens, budget, config_.max_prompt_logits));
    if (!kv_.allocate_slots(request->id, prefix.num_tokens + num_new, request->prompt_logprobs ? nullptr : &prefix,
                            prefix.num_tokens)) {
      break;
    }
    kv_.record_prefix_query(request->num_tokens(), prefix.num_tokens);
    request->num_computed_tokens = prefix.num_tokens;
    if (request->num_cached_tokens < 0) request->num_cached_tokens = prefix.num_tokens;
    waiting_.pop_front();
    request->status = RequestStatus::Running;
    request->draft_tokens.clear();  // an admission computes its prompt (or its recompute) first
    running_.push_back(request);
    output.admitted.push_back(request->id);
    const bool reaches_end = request->num_computed_tokens + num_new == request->num_tokens();
    output.scheduled.push_back({request, request->num_computed_tokens, num_new, 0, reaches_end ? 1 : 0,
                                prompt_rows(*request, request->num_computed_tokens, num_new)});
    output.num_scheduled_tokens += num_new;
    budget -= num_new;
  }
  return output;
}

int64_t Scheduler::draft_limit(const Request& request) const {
  // Accepting every draft adds drafts + 1 tokens.
  int64_t limit = request.max_tokens - request.num_output_tokens() - 1;
  if (!config_.streaming) limit = std::min(limit, config_.max_model_len - request.num_tokens() - 1);
  return std::max<int64_t>(limit, 0);
}

void Scheduler::update_from_output(const SchedulerOutput& output,
                                   std::span<const std::vector<TokenId>> accepted) {
  if (accepted.size() != output.scheduled.size()) {
    fail("internal: {} accepted-token lists for {} scheduled requests", accepted.size(), output.scheduled.size());
  }
  for (size_t i = 0; i < output.scheduled.size(); ++i) {
    const ScheduledRequest& s = output.scheduled[i];
    Request* request = s.request;
    if (request->finished()) continue;  // finished by the engine in the meantime
    // Positions computed this step that hold known tokens (the drafts come after them).
    const int64_t known_end = s.num_computed_tokens + s.num_scheduled_tokens - s.num_draft_tokens;
    if (!s.samples()) {
      request->num_computed_tokens = known_end;
      kv_.cache_computed_blocks(request->id, request->tokens, request->num_computed_tokens);
      continue;
    }
    const std::vector<TokenId>& produced = accepted[i];
    if (produced.empty() || int64_t(produced.size()) > 1 + s.num_draft_tokens) {
      fail("internal: request {} produced {} tokens from {} drafts", request->id, produced.size(),
           s.num_draft_tokens);
    }
    const int64_t num_accepted = int64_t(produced.size()) - 1;
    for (int64_t j = 0; j < num_accepted; ++j) {
      if (produced[size_t(j)] != request->draft_tokens[size_t(j)]) {
        fail("internal: request {}'s accepted token {} is not its draft", request->id, j);
      }
    }
    request->num_draft_tokens += s.num_draft_tokens;
    request->num_accepted_tokens += num_accepted;
    request->draft_tokens.clear();
    FinishReason reason = FinishReason::None;
    int64_t appended = 0;
    for (TokenId token : produced) {
      request->tokens.push_back(token);
      ++appended;
      if (request->is_stop_token(token)) {
        reason = FinishReason::Stop;
      } else if (request->num_output_tokens() >= request->max_tokens ||
                 (!config_.streaming && request->num_tokens() >= config_.max_model_len)) {
        reason = FinishReason::Length;
      }
      if (reason != FinishReason::None) break;  // later tokens of the run are dropped
    }
    // The accepted drafts' K/V (positions from known_end on) were computed after the right tokens
    // and stay; the rejected ones' slots are overwritten by later steps. Roll back first (blocks
    // past the tokens are freed), then hash: no rejected token reaches the prefix cache.
    request->num_computed_tokens = known_end + std::min(num_accepted, appended);
    kv_.trim(request->id, request->num_tokens());
    kv_.cache_computed_blocks(request->id, request->tokens, request->num_computed_tokens);
    if (reason != FinishReason::None) retire(request, reason);
  }
}

void Scheduler::retire(Request* request, FinishReason reason) {
  if (request->status == RequestStatus::Running) {
    running_.erase(std::find(running_.begin(), running_.end(), request));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), request));
  }
  kv_.free(request->id);
  request->status = RequestStatus::Finished;
  request->finish_reason = reason;
  auto it = requests_.find(request->id);
  finished_.push_back(std::move(it->second));
  requests_.erase(it);
}

void Scheduler::finish_request(RequestId id, FinishReason reason) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return;
  retire(it->second.get(), reason);
}

std::vector<std::unique_ptr<Request>> Scheduler::take_finished() {
  std::vector<std::unique_ptr<Request>> out;
  out.swap(finished_);
  return out;
}

std::vector<RequestId> Scheduler::unfinished_ids() const {
  std::vector<RequestId> ids;
  for (const Request* r : running_) ids.push_back(r->id);
  for (const Request* r : waiting_) ids.push_back(r->id);
  return ids;
}

const Request* Scheduler::find(RequestId id) const {
  const auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

}  // namespace kestrel
