#include "spec/draft_model_drafter.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "core/error.h"

namespace kestrel {

std::string check_draft_model(const Model& target, const Model& draft) {
  const int64_t tv = target.config().n_vocab, dv = draft.config().n_vocab;
  if (tv != dv) {
    fail("the draft model's vocabulary has {} tokens but the target's has {}: speculative decoding "
         "needs a draft with the target's vocabulary",
         dv, tv);
  }
  if (draft.weight_bytes() >= target.weight_bytes()) {
    return fmt::format("the draft model ({:.0f} MiB of weights) is not smaller than the target ({:.0f} MiB): "
                       "drafting will likely cost more than it saves",
                       double(draft.weight_bytes()) / (1 << 20), double(target.weight_bytes()) / (1 << 20));
  }
  return "";
}

DraftModelDrafter::DraftModelDrafter(const Model& draft, const RunnerConfig& runner,
                                     std::vector<KVCacheGroupSpec> groups, int block_size, Backend* shared_backend,
                                     bool sample_drafts, std::vector<TokenId> head_tokens)
    : model_(draft),
      head_(head_tokens.empty() ? nullptr : std::make_unique<DraftHead>(draft.weights().output, head_tokens)),
      kv_(std::move(groups), block_size, /*enable_prefix_caching=*/true),
      runner_(draft, runner, shared_backend),
      sample_drafts_(sample_drafts) {
  if (head_ != nullptr) runner_.set_output_head(&head_->view());
}

void DraftModelDrafter::release(RequestId id) {
  kv_.free(id);
  sequences_.erase(id);
}

double DraftModelDrafter::cost_seconds(int64_t num_requests, int num_drafts) const {
  if (num_drafts <= 0) return 0.0;
  // The first round also catches up on the last step's accepted tokens (about two per request).
  return cost_.seconds(kRoundCatchUp * num_requests) + double(num_drafts - 1) * cost_.seconds(num_requests);
}

DraftModelDrafter::Resume DraftModelDrafter::resume(const Sequence* seq, std::span<const TokenId> tokens) const {
  Resume r;
  if (seq == nullptr) return r;  // new to the draft: everything from position 0
  r.base = std::min(seq->base, int64_t(tokens.size()) - 1);
  const std::span<const TokenId> own = tokens.subspan(size_t(r.base));
  const auto mismatch = std::mismatch(seq->fed.begin(), seq->fed.end(), own.begin(), own.end());
  r.common = std::min<int64_t>(mismatch.first - seq->fed.begin(), int64_t(own.size()) - 1);
  // Far behind (drafting was off for a while, e.g. a probe of a draft the policy turned off):
  // start again from the last kCatchUpWindow tokens rather than computing everything since.
  // The drafts see less context; the target verifies them as always.
  if (!seq->fed.empty() && int64_t(own.size()) - r.common > kCatchUpWindow) {
    r = {int64_t(tokens.size()) - kCatchUpWindow, 0, true};
  }
  return r;
}

int64_t DraftModelDrafter::catch_up_tokens(RequestId id, std::span<const TokenId> tokens) const {
  if (tokens.empty()) return 0;
  const auto it = sequences_.find(id);
  // A new sequence computes its whole prompt (its prefix-cache hits are not looked up here).
  const Resume r = resume(it == sequences_.end() ? nullptr : &it->second, tokens);
  return std::max<int64_t>(0, int64_t(tokens.size()) - r.base - r.common - kRoundCatchUp);
}

double DraftModelDrafter::catch_up_seconds(int64_t tokens) const { return tokens > 0 ? cost_.seconds(tokens) : 0.0; }

void DraftModelDrafter::propose(std::span<const DraftQuery> queries, std::span<DraftProposal> out) {
  const size_t n_vocab = size_t(model_.config().n_vocab);
  // Per query: the sequence the draft extends (the request's tokens, then its drafts so far).
  std::vector<std::vector<TokenId>> seqs(queries.size());
  std::vector<size_t> active;
  std::vector<int64_t> first;  // first position each active query computes this round
  for (size_t i = 0; i < queries.size(); ++i) {
    out[i].tokens.clear();
    out[i].dists.clear();
    const DraftQuery& q = queries[i];
    if (q.max_drafts <= 0 || q.tokens.empty()) continue;
    Sequence& seq = sequences_[q.id];
    const Resume r = resume(&seq, q.tokens);
    if (r.restart) {
      kv_.free(q.id);
      seq.fed.clear();
    }
    seq.base = r.base;
    // The draft's sequence covers the request's tokens from seq.base on (draft positions 0..).
    const std::span<const TokenId> tokens = q.tokens.subspan(size_t(seq.base));
    int64_t common = r.common;
    // A sequence new to the draft starts from whatever of its prompt the draft's prefix cache has
    // (shared system prompts, n > 1, and requests the draft saw before a preemption).
    CachedPrefix prefix;
    if (common == 0) {
      kv_.free(q.id);
      prefix = kv_.find_cached_prefix(tokens.first(tokens.size() - 1));
      common = prefix.num_tokens;
      seq.fed.assign(tokens.begin(), tokens.begin() + common);
    }
    seq.fed.resize(size_t(common));
    kv_.trim(q.id, common);
    if (!kv_.allocate_slots(q.id, int64_t(tokens.size()), prefix.num_tokens > 0 ? &prefix : nullptr, common)) {
      release(q.id);  // no room in the draft's cache: no drafts for it this step
      continue;
    }
    // The request's whole history: the processors (penalties, grammar) see what the target's see.
    seqs[i].assign(q.tokens.begin(), q.tokens.end());
    // The tokens fed this round join a subset head (prompts and accepted output: the words of
    // the text being written).
    if (head_ != nullptr) head_->add(tokens.subspan(size_t(common)));
    active.push_back(i);
    first.push_back(common);
  }
  TokenDistribution dist;
  while (!active.empty()) {
    std::vector<SequenceChunk> chunks;
    chunks.reserve(active.size());
    for (size_t a = 0; a < active.size(); ++a) {
      const size_t i = active[a];
      const int64_t base = sequences_[queries[i].id].base;
      SequenceChunk chunk;
      chunk.tokens = std::span<const TokenId>(seqs[i]).subspan(size_t(base + first[a]));
      chunk.start_position = first[a];
      for (int g = 0; g < kv_.num_groups(); ++g) chunk.block_tables.push_back(kv_.block_table(queries[i].id, g));
      chunk.logits_from = int64_t(chunk.tokens.size()) - 1;
      chunks.push_back(chunk);
    }
    // A round's cost is its forward and the drafts drawn from it (processors over whole rows).
    const auto round_start = std::chrono::steady_clock::now();
    int64_t round_tokens = 0;
    for (const SequenceChunk& c : chunks) round_tokens += int64_t(c.tokens.size());
    const std::span<float> logits = runner_.execute(chunks);
    std::vector<size_t> next_active;
    std::vector<int64_t> next_first;
    for (size_t a = 0; a < active.size(); ++a) {
      const size_t i = active[a];
      const DraftQuery& q = queries[i];
      Sequence& seq = sequences_[q.id];
      seq.fed.insert(seq.fed.end(), seqs[i].begin() + seq.base + first[a], seqs[i].end());
      kv_.cache_computed_blocks(q.id, seq.fed, int64_t(seq.fed.size()));
      std::span<float> row;
      if (head_ == nullptr) {
        row = logits.subspan(a * n_vocab, n_vocab);
      } else {
        full_row_.resize(n_vocab);
        head_->scatter(logits.subspan(a * size_t(head_->size()), size_t(head_->size())), full_row_);
        row = full_row_;
      }
      // The request's own processors shape q, as they shape the target's p.
      TokenId token;
      if (sample_drafts_ && !q.sampler->params().greedy()) {
        q.sampler->distribution(row, seqs[i], &dist);
        token = draw_token(dist, q.sampler->uniform(int64_t(seqs[i].size()), 3));
        out[i].dists.push_back(dist);
      } else {
        token = q.sampler->chain().most_likely(row, seqs[i]);
      }
      out[i].tokens.push_back(token);
      seqs[i].push_back(token);
      // Another round for this request if it wants more drafts and its cache has room.
      const int64_t length = int64_t(seqs[i].size()) - seq.base;  // the draft's sequence
      if (int(out[i].tokens.size()) < q.max_drafts && kv_.allocate_slots(q.id, length, nullptr, length - 1)) {
        next_active.push_back(i);
        next_first.push_back(length - 1);
      }
    }
    cost_.observe(round_tokens, std::chrono::duration<double>(std::chrono::steady_clock::now() - round_start).count());
    active.swap(next_active);
    first.swap(next_first);
  }
}

}  // namespace kestrel
