#include "backend/cpu/attention_cpu.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "backend/cpu/vec_math.h"
#include "core/error.h"

namespace kestrel::cpu {
namespace {

// {hsum_tree(a0), hsum_tree(a1), hsum_tree(a2), hsum_tree(a3)}.
inline __m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 quads = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(quads), _mm256_extractf128_ps(quads, 1));
}

// x . y over n floats in a fixed order: 8 lanes, hsum_tree, then the scalar tail.
inline float dot(const float* x, const float* y, int n) {
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc);
  float sum = hsum_tree(acc);
  for (; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

// scores[i] = (q . k_i) * scale for the `count` keys k_i = k + i * stride (head_dim hd floats
// each); returns their maximum. Eight keys at a time share each load of q and one reduction;
// each score is the same arithmetic as dot(q, k_i, hd).
inline float block_scores(const float* q, const float* k, int64_t stride, int count, int hd, float scale,
                          float* scores) {
  int i = 0;
  if (hd % 8 == 0) {
    for (; i + 8 <= count; i += 8) {
      const float* ki = k + i * stride;
      __m256 acc[8];
      for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
      for (int d = 0; d < hd; d += 8) {
        const __m256 qv = _mm256_loadu_ps(q + d);
        for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(ki + j * stride + d), acc[j]);
      }
      const __m256 sums = _mm256_set_m128(reduce4(acc[4], acc[5], acc[6], acc[7]), reduce4(acc[0], acc[1], acc[2], acc[3]));
      _mm256_storeu_ps(scores + i, _mm256_mul_ps(sums, _mm256_set1_ps(scale)));
    }
  }
  for (; i < count; ++i) scores[i] = dot(q, k + i * stride, hd) * scale;
  __m256 max8 = _mm256_set1_ps(-INFINITY);
  int j = 0;
  for (; j + 8 <= count; j += 8) max8 = _mm256_max_ps(max8, _mm256_loadu_ps(scores + j));
  __m128 max4 = _mm_max_ps(_mm256_castps256_ps128(max8), _mm256_extractf128_ps(max8, 1));
  max4 = _mm_max_ps(max4, _mm_movehl_ps(max4, max4));
  float max = std::max(_mm_cvtss_f32(max4), _mm_cvtss_f32(_mm_movehdup_ps(max4)));
  for (; j < count; ++j) max = std::max(max, scores[j]);
  return max;
}

// acc[0, hd) = acc * correction + sum_i w[i] * v_i over the `count` rows v_i = v + i * stride, in
// key order (the multiply is skipped when correction == 1). 64 elements of acc at a time stay in
// registers across the keys.
inline void block_accumulate(float* acc, float correction, const float* w, const float* v, int64_t stride,
                             int count, int hd) {
  const __m256 c = _mm256_set1_ps(correction);
  const bool rescale = correction != 1.0f;
  int d = 0;
  for (; d + 64 <= hd; d += 64) {
    __m256 a[8];
    for (int j = 0; j < 8; ++j) {
      a[j] = _mm256_loadu_ps(acc + d + 8 * j);
      if (rescale) a[j] = _mm256_mul_ps(a[j], c);
    }
    for (int i = 0; i < count; ++i) {
      const __m256 wi = _mm256_set1_ps(w[i]);
      const float* vi = v + i * stride + d;
      for (int j = 0; j < 8; ++j) a[j] = _mm256_fmadd_ps(wi, _mm256_loadu_ps(vi + 8 * j), a[j]);
    }
    for (int j = 0; j < 8; ++j) _mm256_storeu_ps(acc + d + 8 * j, a[j]);
  }
  for (; d + 8 <= hd; d += 8) {
    __m256 a = _mm256_loadu_ps(acc + d);
    if (rescale) a = _mm256_mul_ps(a, c);
    for (int i = 0; i < count; ++i) a = _mm256_fmadd_ps(_mm256_set1_ps(w[i]), _mm256_loadu_ps(v + i * stride + d), a);
    _mm256_storeu_ps(acc + d, a);
  }
  for (; d < hd; ++d) {
    float a = rescale ? acc[d] * correction : acc[d];
    for (int i = 0; i < count; ++i) a = std::fma(w[i], v[i * stride + d], a);
    acc[d] = a;
  }
}

// Running softmax state of one (query token, query head): max, sum of weights, weighted V.
struct Softmax {
  float max = -INFINITY;
  float sum = 0.0f;
  float* acc = nullptr;  // [head_dim]
};

// Folds partial state `p` into `r` (both already normalised to their own max).
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

struct Job {
  const PagedAttentionArgs& a;
  const float* q;
  const KvLayerView& cache;
  int group;          // query heads per KV head
  int64_t kv_width;
  int64_t q_width;

  int32_t visible_first(int32_t position) const {
    return a.window > 0 ? std::max(0, position - a.window + 1) : 0;
  }

  // Attention of the tile's queries for KV head `kv_head` over positions [p_begin, p_end) of the
  // context (one partition); results go to states[token_in_tile * group + head_in_group], which
  // start empty.
  void partition(const Tile& tile, int kv_head, int32_t p_begin, int32_t p_end, Softmax* states,
                 float* scores) const {
    const int hd = a.head_dim;
    const int32_t* table = a.block_tables + int64_t(a.token_seq[tile.first]) * a.max_blocks_per_seq;
    // Only blocks some query of the tile can see: nothing after the last query's position, nothing
    // before the first query's window.
    p_end = std::min(p_end, a.positions[tile.first + tile.count - 1] + 1);
    p_begin = std::max(p_begin, visible_first(a.positions[tile.first]));
    for (int32_t block_start = p_begin - p_begin % a.block_size; block_start < p_end;
         block_start += a.block_size) {
      const int64_t base = int64_t(table[block_start / a.block_size]) * a.block_size;
      const int32_t lo = std::max(block_start, p_begin);
      const int32_t hi = std::min(block_start + a.block_size, p_end);  // exclusive
      for (int t = 0; t < tile.count; ++t) {
        const int64_t token = tile.first + t;
        const int32_t pos = a.positions[token];
        const int32_t from = std::max(lo, visible_first(pos));
        const int32_t to = std::min(hi, pos + 1);  // causal
        if (from >= to) continue;
        for (int g = 0; g < group; ++g) {
          const int head = kv_head * group + g;
          const float* qh = q + token * q_width + int64_t(head) * hd;
          Softmax& s = states[t * group + g];
          const float* k = cache.k + (base + from - block_start) * kv_width + int64_t(kv_head) * hd;
          const float* v = cache.v + (base + from - block_start) * kv_width + int64_t(kv_head) * hd;
          const float block_max = block_scores(qh, k, kv_width, to - from, hd, a.scale, scores);
          const float new_max = std::max(s.max, block_max);
          const float correction = s.sum == 0.0f ? 1.0f : std::exp(s.max - new_max);
          const float sum = s.sum * correction + exp_shifted_sum(scores, new_max, to - from);
          block_accumulate(s.acc, correction, scores, v, kv_width, to - from, hd);
          s.sum = sum;
          s.max = new_max;
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

void paged_attention(ThreadPool& pool, const PagedAttentionArgs& a, const float* q,
                     const KvLayerView& cache, float* out) {
  if (a.n_kv_head <= 0 || a.n_head % a.n_kv_head != 0) {
    fail("attention: {} query heads do not divide into {} KV heads", a.n_head, a.n_kv_head);
  }
  const int hd = a.head_dim;
  const int group = a.n_head / a.n_kv_head;
  const Job job{a, q, cache, group, int64_t(a.n_kv_head) * hd, int64_t(a.n_head) * hd};
  const std::vector<Tile> tiles = make_tiles(a);

  // Partitions of a tile: fixed ranges of absolute positions, up to the tile's last position.
  auto num_partitions = [&](const Tile& tile) {
    return int(a.positions[tile.first + tile.count - 1] / kPartitionTokens) + 1;
  };
  int max_partitions = 1;
  for (const Tile& tile : tiles) max_partitions = std::max(max_partitions, num_partitions(tile));
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
    std::vector<float> scores(static_cast<size_t>(a.block_size));
    auto reset = [&](std::vector<Softmax>& states, std::vector<float>& acc) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int i = 0; i < states_per_item; ++i) states[size_t(i)] = Softmax{-INFINITY, 0.0f, acc.data() + size_t(i) * size_t(hd)};
    };
    // Dynamic scheduling: prefill tiles late in a sequence cost more than early ones.
    for (int64_t w; (w = next.fetch_add(1)) < work;) {
      const int64_t item = split ? w / max_partitions : w;
      const Tile& tile = tiles[size_t(item / a.n_kv_head)];
      const int kv_head = int(item % a.n_kv_head);
      const int parts = num_partitions(tile);
      if (!split) {
        reset(result, acc_result);
        for (int part = 0; part < parts; ++part) {
          reset(partial, acc_partial);
          job.partition(tile, kv_head, part * kPartitionTokens, (part + 1) * kPartitionTokens, partial.data(), scores.data());
          for (int i = 0; i < tile.count * group; ++i) merge(result[size_t(i)], partial[size_t(i)], hd);
        }
        write_output(tile, kv_head, result.data());
      } else {
        const int part = int(w % max_partitions);
        if (part >= parts) continue;
        reset(partial, acc_partial);
        job.partition(tile, kv_head, part * kPartitionTokens, (part + 1) * kPartitionTokens, partial.data(), scores.data());
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
    for (int64_t item = begin; item < end; ++item) {
      const Tile& tile = tiles[size_t(item / a.n_kv_head)];
      const int kv_head = int(item % a.n_kv_head);
      std::fill(acc_result.begin(), acc_result.end(), 0.0f);
      for (int i = 0; i < states_per_item; ++i) result[size_t(i)] = Softmax{-INFINITY, 0.0f, acc_result.data() + size_t(i) * size_t(hd)};
      for (int part = 0; part < num_partitions(tile); ++part) {
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
