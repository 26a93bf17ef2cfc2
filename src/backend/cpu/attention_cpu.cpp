#include "backend/cpu/attention_cpu.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/head_transforms.h"
#include "core/error.h"

namespace kestrel::cpu {
namespace {

// Running softmax state of one (query token, query head): max, sum of weights, weighted V.
struct Softmax {
  float max = -INFINITY;
  float sum = 0.0f;
  float* acc = nullptr;  // [head_dim]
};

// Folds partial state `p` into `r` (both already normalised to their own max). An empty partial
// (a partition where the token sees nothing) changes nothing, so folding over extra partitions
// keeps a token's result the same.
inline void merge(Softmax& r, const Softmax& p, int head_dim) {
  if (p.sum == 0.0f) return;
  if (r.sum == 0.0f) {
    r.max = p.max;
    r.sum = p.sum;
    std::copy(p.acc, p.acc + head_dim, r.acc);
    return;
  }
  const float m = std::max(r.max, p.max);
  const float cr = std::exp(r.max - m);
  const float cp = std::exp(p.max - m);
  r.sum = r.sum * cr + p.sum * cp;
  for (int d = 0; d < head_dim; ++d) r.acc[d] = r.acc[d] * cr + p.acc[d] * cp;
  r.max = m;
}

// One query tile: tokens [first, first + count) of the batch, all in one sequence at increasing
// positions.
struct Tile {
  int64_t first = 0;
  int count = 0;
};

// Chunks whose rows are asked for ahead of the one being computed.
constexpr int kPrefetchChunks = 2;

// Asks for `bytes` from p on into the cache, one line at a time.
inline void prefetch(const uint8_t* p, int64_t bytes) {
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 2);
}

// Per-thread buffers.
struct Scratch {
  std::vector<float> k, v;       // [kChunkTokens][head_dim] decoded rows of one chunk and KV head
  std::vector<float> scores;     // [kChunkTokens]
  std::vector<float> sink_q;     // [kTileTokens * group][head_dim] queries for the sinks
  std::vector<float> angles;     // [2][n_rot / 2] cos and sin of a sink shift
};

struct Job {
  const PagedAttentionArgs& a;
  const float* q;
  const KvLayerView& cache;
  const AttentionKernels& kernels;
  KvDecodeFn decode_k, decode_v;  // cache rows -> F32 rows
  int group;                      // query heads per KV head
  int64_t q_width;
  const float* inv_freq;          // [n_rot / 2] of sink_rope, when sinks > 0

  // First position of the recent range visible from p (see PagedAttentionArgs).
  int32_t recent_first(int32_t p) const {
    if (a.window <= 0) return 0;
    if (a.sinks <= 0) return std::max(0, p - a.window + 1);
    return std::max(a.sinks, p - (a.window - a.sinks) + 1);
  }
  // How far the sinks' RoPE positions move up for a query at p; 0 while the window holds all.
  int32_t sink_shift(int32_t p) const { return a.sinks > 0 ? std::max(0, p - a.window + 1) : 0; }
  // First position visible from p if its sinks and recent range touch (shift 0): one range.
  int32_t first_visible(int32_t p) const { return a.sinks > 0 && sink_shift(p) == 0 ? 0 : recent_first(p); }

  int32_t tile_first(const Tile& t) const { return a.positions[t.first]; }
  int32_t tile_last(const Tile& t) const { return a.positions[t.first + t.count - 1]; }

  // The partitions (kPartitionTokens positions each) a tile's queries see, in order.
  void partitions(const Tile& tile, std::vector<int32_t>& out) const {
    out.clear();
    const int32_t j_lo = first_visible(tile_first(tile)) / kPartitionTokens;
    if (a.sinks > 0 && j_lo > 0) out.push_back(0);
    for (int32_t j = j_lo; j <= tile_last(tile) / kPartitionTokens; ++j) out.push_back(j);
  }

  // Queries for scoring the sinks: each token's query rotated back by its sink shift (un-rotated
  // from and back into Hadamard space when Q and K were rotated).
  void make_sink_queries(const Tile& tile, int kv_head, float* sink_q, float* angles) const {
    const int hd = a.head_dim;
    const int half = a.sink_rope->n_rot / 2;
    for (int t = 0; t < tile.count; ++t) {
      const int32_t shift = sink_shift(a.positions[tile.first + t]);
      for (int g = 0; g < group; ++g) {
        const float* src = q + (tile.first + t) * q_width + int64_t(kv_head * group + g) * hd;
        float* dst = sink_q + (int64_t(t) * group + g) * hd;
        std::copy(src, src + hd, dst);
        if (shift == 0) continue;
        if (a.rotated) hadamard_head(dst, hd);
        rope_angles(-float(shift), *a.sink_rope, inv_freq, angles, angles + half);
        rope_apply(dst, *a.sink_rope, angles, angles + half);
        if (a.rotated) hadamard_head(dst, hd);
      }
    }
  }

  // Keys [from, to) of the decoded block (rows from `lo`) into state s with query qh.
  void segment(const float* qh, const float* k, const float* v, int64_t stride, int32_t lo, int32_t from,
               int32_t to, Softmax& s, float* scores) const {
    if (from >= to) return;
    const int count = to - from;
    const float* kr = k + (from - lo) * stride;
    const float* vr = v + (from - lo) * stride;
    float block_max = kernels.block_scores(qh, kr, stride, count, a.head_dim, a.scale, scores);
    if (a.softcap > 0.0f) {
      // Gemma 2's soft-capped scores; each key's value depends on its own score only.
      block_max = -INFINITY;
      for (int i = 0; i < count; ++i) {
        scores[i] = a.softcap * std::tanh(scores[i] / a.softcap);
        block_max = std::max(block_max, scores[i]);
      }
    }
    const float new_max = std::max(s.max, block_max);
    const float correction = s.sum == 0.0f ? 1.0f : std::exp(s.max - new_max);
    const float sum = s.sum * correction + kernels.exp_shifted_sum(scores, new_max, count);
    kernels.block_accumulate(s.acc, correction, scores, vr, stride, count, a.head_dim);
    s.sum = sum;
    s.max = new_max;
  }

  // Cache rows of positions [from, to) of the tile's sequence for `kv_head`, per block: fn(slot
  // of `from`'s row in the block, first position, row count).
  template <typename Fn>
  void for_block_runs(const int32_t* table, int32_t from, int32_t to, Fn&& fn) const {
    for (int32_t p = from; p < to;) {
      const int32_t end = std::min(to, (p / a.block_size + 1) * a.block_size);
      fn(int64_t(table[p / a.block_size]) * a.block_size + p % a.block_size, p, end - p);
      p = end;
    }
  }

  // Attention of the tile's queries for KV head `kv_head` over partition j; results go to
  // states[token_in_tile * group + head_in_group], which start empty. The visible positions are
  // walked in chunks of kChunkTokens aligned to absolute positions: each chunk's K and V rows are
  // decoded once into L1/L2 rows (from however many blocks hold them) and serve every query of
  // the tile and every head of the group, in one run of keys each.
  void partition(const Tile& tile, int kv_head, int32_t j, Softmax* states, Scratch& scratch,
                 bool& sink_q_ready) const {
    const int hd = a.head_dim;
    const int32_t* table = a.block_tables + int64_t(a.token_seq[tile.first]) * a.max_blocks_per_seq;
    const int32_t p_begin = j * kPartitionTokens;
    const int32_t p_end = std::min((j + 1) * kPartitionTokens, tile_last(tile) + 1);
    // The positions some query of the tile sees here: its sinks (when they have moved) and the
    // union of the recent ranges.
    const int32_t recent = std::max(p_begin, first_visible(tile_first(tile)));
    int32_t chunks[2 * (kPartitionTokens / kChunkTokens + 1)][2];
    int num_chunks = 0;
    auto add = [&](int32_t from, int32_t to) {
      for (int32_t c = from; c < to;) {
        const int32_t end = std::min(to, (c / kChunkTokens + 1) * kChunkTokens);
        chunks[num_chunks][0] = c;
        chunks[num_chunks++][1] = end;
        c = end;
      }
    };
    const bool moved_sinks = a.sinks > 0 && sink_shift(tile_last(tile)) > 0;
    if (moved_sinks && recent > a.sinks) add(p_begin, std::min(p_end, a.sinks));
    add(recent, p_end);

    // Latent attention's values are its keys' rows (KvCacheSpec::value_in_key): read and decoded once.
    const bool v_is_k = cache.v == cache.k;
    auto prefetch_chunk = [&](int ci) {
      for_block_runs(table, chunks[ci][0], chunks[ci][1], [&](int64_t slot, int32_t, int32_t rows) {
        prefetch(cache.k_row(slot, kv_head), rows * cache.k_row_bytes);
        if (!v_is_k) prefetch(cache.v_row(slot, kv_head), rows * cache.v_row_bytes);
      });
    };
    for (int ci = 0; ci < std::min(num_chunks, kPrefetchChunks); ++ci) prefetch_chunk(ci);
    for (int ci = 0; ci < num_chunks; ++ci) {
      const int32_t lo = chunks[ci][0], hi = chunks[ci][1];
      // The next chunk's rows come in while this one is computed (its blocks lie anywhere).
      if (ci + kPrefetchChunks < num_chunks) prefetch_chunk(ci + kPrefetchChunks);
      for_block_runs(table, lo, hi, [&](int64_t slot, int32_t first, int32_t rows) {
        float* k_dst = scratch.k.data() + int64_t(first - lo) * hd;
        float* v_dst = scratch.v.data() + int64_t(first - lo) * hd;
        decode_k(cache.k_row(slot, kv_head), cache.k_row_bytes, rows, hd, k_dst);
        if (!v_is_k) decode_v(cache.v_row(slot, kv_head), cache.v_row_bytes, rows, hd, v_dst);
      });
      const float* k = scratch.k.data();
      const float* v = v_is_k ? k : scratch.v.data();
      for (int t = 0; t < tile.count; ++t) {
        const int64_t token = tile.first + t;
        const int32_t pos = a.positions[token];
        const int32_t to = std::min(hi, pos + 1);  // causal
        const int32_t shift = sink_shift(pos);
        const float* qt = q + token * q_width + int64_t(kv_head * group) * hd;
        if (shift > 0 && lo < a.sinks && !sink_q_ready) {
          make_sink_queries(tile, kv_head, scratch.sink_q.data(), scratch.angles.data());
          sink_q_ready = true;
        }
        for (int g = 0; g < group; ++g) {
          Softmax& s = states[t * group + g];
          if (shift == 0) {
            segment(qt + int64_t(g) * hd, k, v, hd, lo, std::max(lo, first_visible(pos)), to, s, scratch.scores.data());
          } else {
            const float* qs = scratch.sink_q.data() + (int64_t(t) * group + g) * hd;
            segment(qs, k, v, hd, lo, lo, std::min(to, a.sinks), s, scratch.scores.data());
            segment(qt + int64_t(g) * hd, k, v, hd, lo, std::max(lo, recent_first(pos)), to, s, scratch.scores.data());
          }
        }
      }
    }
  }
};

std::vector<Tile> make_tiles(const PagedAttentionArgs& a) {
  std::vector<Tile> tiles;
  for (int64_t t = 0; t < a.num_tokens;) {
    Tile tile{t, 1};
    while (tile.count < kTileTokens && t + tile.count < a.num_tokens &&
           a.token_seq[t + tile.count] == a.token_seq[t] &&
           a.positions[t + tile.count] == a.positions[t + tile.count - 1] + 1) {
      ++tile.count;
    }
    tiles.push_back(tile);
    t += tile.count;
  }
  return tiles;
}

}  // namespace

void paged_attention(ThreadPool& pool, const AttentionKernels& kernels, const PagedAttentionArgs& a,
                     const float* q, const KvLayerView& cache, float* out) {
  if (a.n_kv_head <= 0 || a.n_head % a.n_kv_head != 0) {
    fail("attention: {} query heads do not divide into {} KV heads", a.n_head, a.n_kv_head);
  }
  if (a.sinks > 0 && (a.window <= a.sinks || a.sink_rope == nullptr)) {
    fail("internal: attention sinks need a window larger than the sinks and the layer's RoPE");
  }
  auto decoder = [&](DType type) -> KvDecodeFn {
    const KvDecodeFn fn = kernels.decoder(type);
    if (fn == nullptr) fail("attention: no decoder for KV cache type {}", dtype_name(type));
    return fn;
  };
  const int hd = a.head_dim;
  const int group = a.n_head / a.n_kv_head;
  std::vector<float> inv_freq;
  if (a.sinks > 0) {
    inv_freq.resize(size_t(std::max(1, a.sink_rope->n_rot / 2)));
    rope_inv_freq(*a.sink_rope, inv_freq.data());
  }
  const Job job{a, q, cache, kernels, decoder(cache.k_type), decoder(cache.v_type), group,
                int64_t(a.n_head) * hd, inv_freq.data()};
  const std::vector<Tile> tiles = make_tiles(a);

  std::vector<int32_t> parts;
  int max_partitions = 1;
  for (const Tile& tile : tiles) {
    job.partitions(tile, parts);
    max_partitions = std::max(max_partitions, int(parts.size()));
  }
  const int64_t items = int64_t(tiles.size()) * a.n_kv_head;
  // Flash-decoding: with too few items to keep every thread busy, spread partitions instead.
  const bool split = max_partitions > 1 && items < 2 * int64_t(pool.num_threads());

  const int states_per_item = kTileTokens * group;
  std::vector<float> partial_storage;
  if (split) {
    partial_storage.resize(size_t(items) * size_t(max_partitions) * size_t(states_per_item) * size_t(hd + 2));
  }
  auto partial_at = [&](int64_t item, int part, int state) {
    return partial_storage.data() +
           ((size_t(item) * size_t(max_partitions) + size_t(part)) * size_t(states_per_item) + size_t(state)) *
               size_t(hd + 2);
  };
  auto write_output = [&](const Tile& tile, int kv_head, Softmax* states) {
    for (int t = 0; t < tile.count; ++t) {
      for (int g = 0; g < group; ++g) {
        const Softmax& s = states[t * group + g];
        float* dst = out + (tile.first + t) * job.q_width + int64_t(kv_head * group + g) * hd;
        const float inv = s.sum > 0.0f ? 1.0f / s.sum : 0.0f;
        for (int d = 0; d < hd; ++d) dst[d] = s.acc[d] * inv;
      }
    }
  };

  const int64_t work = split ? items * max_partitions : items;
  std::atomic<int64_t> next{0};
  pool.run([&](int, int) {
    std::vector<float> acc_result(size_t(states_per_item) * size_t(hd));
    std::vector<float> acc_partial(size_t(states_per_item) * size_t(hd));
    std::vector<Softmax> result(static_cast<size_t>(states_per_item)), partial(static_cast<size_t>(states_per_item));
    Scratch scratch;
    scratch.k.resize(size_t(kChunkTokens) * size_t(hd));
    scratch.v.resize(size_t(kChunkTokens) * size_t(hd));
    scratch.scores.resize(size_t(kChunkTokens));
    if (a.sinks > 0) {
      scratch.sink_q.resize(size_t(states_per_item) * size_t(hd));
      scratch.angles.resize(2 * inv_freq.size());
    }
    std::vector<int32_t> tile_parts;
    auto reset = [&](std::vector<Softmax>& states, std::vector<float>& acc) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int i = 0; i < states_per_item; ++i) states[size_t(i)] = Softmax{-INFINITY, 0.0f, acc.data() + size_t(i) * size_t(hd)};
    };
    // Dynamic scheduling: prefill tiles late in a sequence cost more than early ones.
    for (int64_t w; (w = next.fetch_add(1)) < work;) {
      const int64_t item = split ? w / max_partitions : w;
      const Tile& tile = tiles[size_t(item / a.n_kv_head)];
      const int kv_head = int(item % a.n_kv_head);
      job.partitions(tile, tile_parts);
      bool sink_q_ready = false;
      if (!split) {
        reset(result, acc_result);
        for (int32_t j : tile_parts) {
          reset(partial, acc_partial);
          job.partition(tile, kv_head, j, partial.data(), scratch, sink_q_ready);
          for (int i = 0; i < tile.count * group; ++i) merge(result[size_t(i)], partial[size_t(i)], hd);
        }
        write_output(tile, kv_head, result.data());
      } else {
        const int part = int(w % max_partitions);
        if (part >= int(tile_parts.size())) continue;
        reset(partial, acc_partial);
        job.partition(tile, kv_head, tile_parts[size_t(part)], partial.data(), scratch, sink_q_ready);
        for (int i = 0; i < tile.count * group; ++i) {
          float* slot = partial_at(item, part, i);
          slot[0] = partial[size_t(i)].max;
          slot[1] = partial[size_t(i)].sum;
          std::copy(partial[size_t(i)].acc, partial[size_t(i)].acc + hd, slot + 2);
        }
      }
    }
  });
  if (!split) return;
  // Merge the partitions of each item in order (the same fold as the unsplit path).
  pool.parallel_for(items, [&](int64_t begin, int64_t end) {
    std::vector<float> acc_result(size_t(states_per_item) * size_t(hd));
    std::vector<Softmax> result(static_cast<size_t>(states_per_item));
    std::vector<int32_t> tile_parts;
    for (int64_t item = begin; item < end; ++item) {
      const Tile& tile = tiles[size_t(item / a.n_kv_head)];
      const int kv_head = int(item % a.n_kv_head);
      job.partitions(tile, tile_parts);
      std::fill(acc_result.begin(), acc_result.end(), 0.0f);
      for (int i = 0; i < states_per_item; ++i) result[size_t(i)] = Softmax{-INFINITY, 0.0f, acc_result.data() + size_t(i) * size_t(hd)};
      for (int part = 0; part < int(tile_parts.size()); ++part) {
        for (int i = 0; i < tile.count * group; ++i) {
          float* slot = partial_at(item, part, i);
          merge(result[size_t(i)], Softmax{slot[0], slot[1], slot + 2}, hd);
        }
      }
      write_output(tile, kv_head, result.data());
    }
  });
}

}  // namespace kestrel::cpu
