// The register-blocked matrix loop shared by the SIMD kernel files (kernels_*_avx2.cpp,
// kernels_*_avx512.cpp), which include it and nothing else includes. Everything here has internal
// linkage, so each ISA's file gets its own copy compiled for that ISA: no inline function holding
// AVX-512 code can be merged by the linker into code that must run on an AVX2-only machine. For
// the same reason those files use no std:: templates in their kernels and keep every constant in
// plain arrays (a vector constant initialised at namespace scope would run AVX-512 code at start-up).
//
// A format supplies a micro-kernel policy K:
//   K::kRows, K::kTokens     the register tile (weight rows x tokens) used when n > 1
//   K::kDecodeRows           rows per pass when n == 1 (several rows hide memory latency)
//   K::Acc                   one (row, token) accumulator
//   K::W, K::A               one decoded step of a weight row / of an activation row
//   K::steps(k)              steps in a row of k elements (the last one may be partial)
//   K::direct_steps(k)       the first steps, which load_w decodes in place; the rest go through
//                            load_w_tail, which never reads past the row's end
//   K::zero()                a fresh accumulator
//   K::load_w(row, s)        decodes step s of weight row `row` (row points at the row's start)
//   K::load_w_tail(row, s, k)  the same values for a step at the row's end (masked or copied
//                            loads; a partial step's missing elements decode to zero weight)
//   K::load_a(act, s)        step s of a converted activation row
//   K::mac(acc, w, a)        acc += w . a
//   K::finish(acc, row)      the dot product as a float (row: for per-row scales)
//   K::finish_token(acc, row, act)  optional, instead of finish: for activation rows that carry
//                            per-token data (W8A8's token scale); act is the token's converted row
//   K::kPackSteps            optional: for batches of at least K::kTokens tokens, decode each
//                            weight row tile once per chunk of kPackSteps steps into an L1 buffer
//                            and run every token tile of the block over that chunk, keeping the
//                            accumulators in a buffer between chunks (the float formats, whose
//                            decoded steps are cheap to store and whose tiles are L1-bound, and
//                            the integer formats, whose decoding then costs one pass per block
//                            instead of one per token tile)
//   K::kStepBytes            optional: bytes of one step of a weight row; one-token tiles then
//                            prefetch the next tile's rows (prefetch_next_tile)
//   K::mac_direct(acc, row, s, a)  optional: mac(acc, load_w(row, s), a) for one token without
//                            materialising W (formats whose decoded step does not fit in
//                            registers); one-token tiles use it for their direct steps. It must
//                            run the same arithmetic as load_w + mac (integer sums in any order,
//                            the same float operations in the same order).
//   K::mac_direct2(acc0, acc1, row0, row1, s, a)  optional: mac_direct for two rows at once (tiles
//                            of an even number of rows use it), with the same float operations
//                            per row as mac_direct.
//   K::mac_direct2_lanes(pair, row0, row1, s, a)  optional, instead of mac_direct2 for one-token
//                            tiles: the two rows' accumulators (a float Acc) live in lanes 0 and 1
//                            of one __m128 across the row's steps (lanes 2 and 3 are scratch);
//                            the same float operations per row as mac_direct.
//
// Batch invariance: every (row, token) pair owns one Acc that sees exactly the same sequence of
// mac() calls — steps 0, 1, ..., last — and the same finish(), whichever tile shape, tile position
// or token block computes it. A tile only shares the decoded weights and activations between
// pairs; it never mixes two pairs' arithmetic. Packing changes where a decoded step is read from,
// and chunking only stores an accumulator to memory and reads it back between two steps, so the
// n == 1 path and every blocked or packed path give bitwise the same result.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace kestrel::cpu {
namespace {

// Activations of one token block stay in L2 while every row tile streams past them; larger batches
// are processed block by block (the weights are then read once per block, which costs little next
// to the arithmetic of a block this size).
constexpr int64_t kTokenBlockBytes = 512 * 1024;

// One-token tiles are bound by memory latency as much as by bandwidth: the hardware prefetchers
// follow R interleaved row streams only partly. A format that sets K::kStepBytes (bytes of one
// step of a weight row) has the same step of the next R rows, which the next tile reads about a
// microsecond later, requested now (into L2: a few percent faster than into L1, whose fill
// buffers the current tile's loads need). One thread, weights from DRAM: Q4_K 8.3 -> 13.3 GB/s,
// Q6_K 8.1 -> 14.1, Q8_0 10.9 -> 15.2, F16 13.4 -> 15.5. Past the matrix's end this only touches
// addresses, which a prefetch may do (integer arithmetic, as in prefetch_ahead).
template <class K, int R>
inline void prefetch_next_tile(const uint8_t* w, int64_t w_stride, int64_t s) {
  const uintptr_t base = reinterpret_cast<uintptr_t>(w) + uintptr_t(R * w_stride + s * K::kStepBytes);
  // Steps shorter than a line request each line once: at the step that starts in it.
  if (K::kStepBytes < 64 && (s * K::kStepBytes) % 64 >= K::kStepBytes) return;
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int64_t offset = 0; offset < K::kStepBytes; offset += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(base + uintptr_t(r * w_stride + offset)), _MM_HINT_T1);
    }
  }
}

// Batches of up to this many tokens (a decode step with speculative drafts, a few sequences
// decoding together) are memory-bound like one token: they run the one-token path's row tiles
// (K::kDecodeRows rows, the next tile's weights prefetched) with all n tokens sharing each decoded
// step, instead of the prefill paths, which leave the weight stream to the hardware prefetchers.
// (A 5-token step of Qwen2.5 1.5B Q4_K_M costs 1.5x a 1-token step this way, 2.5x on the packed
// path.) How many tokens fit depends on the registers: 32 zmm hold a decode tile's decoded
// weights and 8 tokens' sums; with 16 ymm more than 3 tokens spill, and the AVX2 interleaved
// tiles (kernels_interleave_avx2.h, from 4 tokens) are faster.
#if defined(__AVX512F__)
constexpr int kSmallBatchTokens = 8;
#else
constexpr int kSmallBatchTokens = 3;
#endif

// K::finish_token when the format has it, else K::finish.
template <class K>
inline float finish_dot(const typename K::Acc& acc, const uint8_t* w_row, const uint8_t* a_row) {
  if constexpr (requires { K::finish_token(acc, w_row, a_row); }) {
    return K::finish_token(acc, w_row, a_row);
  } else {
    (void)a_row;
    return K::finish(acc, w_row);
  }
}

template <class K, int R, int T>
void micro_tile(const uint8_t* w, int64_t w_stride, const uint8_t* a, int64_t a_stride, int64_t k,
                float* y, int64_t y_stride) {
  typename K::Acc acc[R][T];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc[r][t] = K::zero();
  }
  const int64_t direct = K::direct_steps(k);
  int64_t first_step = 0;
  if constexpr (T == 1 && R % 2 == 0 && requires { K::mac_direct2_lanes; }) {
    // One vector holds a row pair's accumulators across the steps: no packing of two scalars
    // into a vector and back out at every step.
    __m128 pair[R / 2];
#pragma GCC unroll 8
    for (int i = 0; i < R / 2; ++i) pair[i] = _mm_setzero_ps();
    for (int64_t s = 0; s < direct; ++s) {
      if constexpr (requires { K::kStepBytes; }) prefetch_next_tile<K, R>(w, w_stride, s);
      const typename K::A av = K::load_a(a, s);
#pragma GCC unroll 8
      for (int i = 0; i < R / 2; ++i) {
        K::mac_direct2_lanes(pair[i], w + 2 * i * w_stride, w + (2 * i + 1) * w_stride, s, av);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R / 2; ++i) {
      acc[2 * i][0] = _mm_cvtss_f32(pair[i]);
      acc[2 * i + 1][0] = _mm_cvtss_f32(_mm_movehdup_ps(pair[i]));
    }
    first_step = direct;
  }
  for (int64_t s = first_step; s < direct; ++s) {
    // Tiles of few tokens stream weights as decode does (see small_batch below).
    if constexpr (T <= kSmallBatchTokens && requires { K::kStepBytes; }) prefetch_next_tile<K, R>(w, w_stride, s);
    if constexpr (T == 1 && requires { K::mac_direct; }) {
      const typename K::A av = K::load_a(a, s);
      if constexpr (R % 2 == 0 && requires { K::mac_direct2; }) {
#pragma GCC unroll 16
        for (int r = 0; r < R; r += 2) {
          K::mac_direct2(acc[r][0], acc[r + 1][0], w + r * w_stride, w + (r + 1) * w_stride, s, av);
        }
      } else {
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) K::mac_direct(acc[r][0], w + r * w_stride, s, av);
      }
      continue;
    }
    typename K::W wv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) wv[r] = K::load_w(w + r * w_stride, s);
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const typename K::A av = K::load_a(a + t * a_stride, s);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) K::mac(acc[r][t], wv[r], av);
    }
  }
  const int64_t steps = K::steps(k);
  for (int64_t s = direct; s < steps; ++s) {
    typename K::W wv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) wv[r] = K::load_w_tail(w + r * w_stride, s, k);
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const typename K::A av = K::load_a(a + t * a_stride, s);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) K::mac(acc[r][t], wv[r], av);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) y[t * y_stride + r] = finish_dot<K>(acc[r][t], w + r * w_stride, a + t * a_stride);
  }
}

// Runs R rows against `n` tokens: whole tiles of K::kTokens, then one narrower tile.
template <class K, int R>
void rows_by_tokens(const uint8_t* w, int64_t w_stride, const uint8_t* a, int64_t a_stride,
                    int64_t n, int64_t k, float* y, int64_t y_stride) {
  constexpr int T = K::kTokens;
  int64_t t = 0;
  for (; t + T <= n; t += T) {
    micro_tile<K, R, T>(w, w_stride, a + t * a_stride, a_stride, k, y + t * y_stride, y_stride);
  }
  const int rest = int(n - t);
  if (rest == 0) return;
  const uint8_t* at = a + t * a_stride;
  float* yt = y + t * y_stride;
  // Tiles of 1 .. T-1 tokens (T <= 8 for every format).
  static_assert(T <= 8);
  switch (rest) {
    case 1: micro_tile<K, R, 1>(w, w_stride, at, a_stride, k, yt, y_stride); break;
    case 2: if constexpr (T > 2) micro_tile<K, R, 2>(w, w_stride, at, a_stride, k, yt, y_stride); break;
    case 3: if constexpr (T > 3) micro_tile<K, R, 3>(w, w_stride, at, a_stride, k, yt, y_stride); break;
    case 4: if constexpr (T > 4) micro_tile<K, R, 4>(w, w_stride, at, a_stride, k, yt, y_stride); break;
    case 5: if constexpr (T > 5) micro_tile<K, R, 5>(w, w_stride, at, a_stride, k, yt, y_stride); break;
    case 6: if constexpr (T > 6) micro_tile<K, R, 6>(w, w_stride, at, a_stride, k, yt, y_stride); break;
    case 7: if constexpr (T > 7) micro_tile<K, R, 7>(w, w_stride, at, a_stride, k, yt, y_stride); break;
    default: break;
  }
}

// Packed path: weights of R rows for steps [s0, s1) were decoded into pack[r * chunk + s - s0];
// the T tokens' accumulators live in acc_io[t * R + r] between chunks.
template <class K, int R, int T>
void micro_tile_packed(const typename K::W* pack, int64_t chunk, const uint8_t* a, int64_t a_stride,
                       int64_t s0, int64_t s1, typename K::Acc* acc_io) {
  typename K::Acc acc[R][T];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc[r][t] = s0 == 0 ? K::zero() : acc_io[t * R + r];
  }
  for (int64_t s = s0; s < s1; ++s) {
    typename K::W wv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) wv[r] = pack[r * chunk + (s - s0)];
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const typename K::A av = K::load_a(a + t * a_stride, s);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) K::mac(acc[r][t], wv[r], av);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc_io[t * R + r] = acc[r][t];
  }
}

template <class K, int R>
void packed_tokens(const typename K::W* pack, int64_t chunk, const uint8_t* a, int64_t a_stride,
                   int64_t n, int64_t s0, int64_t s1, typename K::Acc* acc) {
  constexpr int T = K::kTokens;
  static_assert(T <= 8);
  int64_t t = 0;
  for (; t + T <= n; t += T) {
    micro_tile_packed<K, R, T>(pack, chunk, a + t * a_stride, a_stride, s0, s1, acc + t * R);
  }
  const uint8_t* at = a + t * a_stride;
  typename K::Acc* acct = acc + t * R;
  switch (int(n - t)) {
    case 1: micro_tile_packed<K, R, 1>(pack, chunk, at, a_stride, s0, s1, acct); break;
    case 2: if constexpr (T > 2) micro_tile_packed<K, R, 2>(pack, chunk, at, a_stride, s0, s1, acct); break;
    case 3: if constexpr (T > 3) micro_tile_packed<K, R, 3>(pack, chunk, at, a_stride, s0, s1, acct); break;
    case 4: if constexpr (T > 4) micro_tile_packed<K, R, 4>(pack, chunk, at, a_stride, s0, s1, acct); break;
    case 5: if constexpr (T > 5) micro_tile_packed<K, R, 5>(pack, chunk, at, a_stride, s0, s1, acct); break;
    case 6: if constexpr (T > 6) micro_tile_packed<K, R, 6>(pack, chunk, at, a_stride, s0, s1, acct); break;
    case 7: if constexpr (T > 7) micro_tile_packed<K, R, 7>(pack, chunk, at, a_stride, s0, s1, acct); break;
    default: break;
  }
}

// R rows (R <= K::kRows) against n <= kPackedTokens tokens, chunk by chunk of K::kPackSteps steps.
constexpr int64_t kPackedTokens = 64;

template <class K, int R>
void packed_rows(const uint8_t* w, int64_t w_stride, const uint8_t* a, int64_t a_stride, int64_t n,
                 int64_t k, float* y, int64_t y_stride) {
  constexpr int64_t kChunk = K::kPackSteps;
  alignas(64) typename K::W pack[R * kChunk];
  alignas(64) typename K::Acc acc[R * kPackedTokens];  // the first chunk starts from K::zero()
  const int64_t steps = K::steps(k), direct = K::direct_steps(k);
  for (int64_t s0 = 0; s0 < steps; s0 += kChunk) {
    const int64_t s1 = s0 + kChunk < steps ? s0 + kChunk : steps;
    for (int r = 0; r < R; ++r) {
      for (int64_t s = s0; s < s1; ++s) {
        pack[r * kChunk + (s - s0)] = s < direct ? K::load_w(w + r * w_stride, s) : K::load_w_tail(w + r * w_stride, s, k);
      }
    }
    packed_tokens<K, R>(pack, kChunk, a, a_stride, n, s0, s1, acc);
  }
  for (int r = 0; r < R; ++r) {
    for (int64_t t = 0; t < n; ++t) y[t * y_stride + r] = finish_dot<K>(acc[t * R + r], w + r * w_stride, a + t * a_stride);
  }
}

template <class K>
void matmul_packed(const uint8_t* weights, int64_t weight_row_bytes, int64_t rows, const uint8_t* activations,
                   int64_t act_row_bytes, int64_t n, int64_t k, float* y, int64_t y_stride) {
  constexpr int R = K::kRows;
  // As many tokens as keep their activations in L2 (see kTokenBlockBytes), at most kPackedTokens.
  int64_t block = kTokenBlockBytes / (act_row_bytes > 0 ? act_row_bytes : 1);
  block = block < K::kTokens ? K::kTokens : block > kPackedTokens ? kPackedTokens : block;
  for (int64_t t0 = 0; t0 < n; t0 += block) {
    const int64_t nt = n - t0 < block ? n - t0 : block;
    const uint8_t* a = activations + t0 * act_row_bytes;
    float* yb = y + t0 * y_stride;
    int64_t r = 0;
    for (; r + R <= rows; r += R) {
      packed_rows<K, R>(weights + r * weight_row_bytes, weight_row_bytes, a, act_row_bytes, nt, k, yb + r, y_stride);
    }
    for (; r < rows; ++r) {
      packed_rows<K, 1>(weights + r * weight_row_bytes, weight_row_bytes, a, act_row_bytes, nt, k, yb + r, y_stride);
    }
  }
}

// R rows against n (2 .. kSmallBatchTokens) tokens in one tile.
template <class K, int R>
void small_batch_rows(const uint8_t* w, int64_t w_stride, const uint8_t* a, int64_t a_stride, int64_t n,
                      int64_t k, float* y, int64_t y_stride) {
  static_assert(kSmallBatchTokens <= 8);
  switch (n) {
    case 2: micro_tile<K, R, 2>(w, w_stride, a, a_stride, k, y, y_stride); break;
    case 3: micro_tile<K, R, 3>(w, w_stride, a, a_stride, k, y, y_stride); break;
    case 4: if constexpr (kSmallBatchTokens >= 4) micro_tile<K, R, 4>(w, w_stride, a, a_stride, k, y, y_stride); break;
    case 5: if constexpr (kSmallBatchTokens >= 5) micro_tile<K, R, 5>(w, w_stride, a, a_stride, k, y, y_stride); break;
    case 6: if constexpr (kSmallBatchTokens >= 6) micro_tile<K, R, 6>(w, w_stride, a, a_stride, k, y, y_stride); break;
    case 7: if constexpr (kSmallBatchTokens >= 7) micro_tile<K, R, 7>(w, w_stride, a, a_stride, k, y, y_stride); break;
    case 8: if constexpr (kSmallBatchTokens >= 8) micro_tile<K, R, 8>(w, w_stride, a, a_stride, k, y, y_stride); break;
    default: break;
  }
}

// Rows per small-batch tile: K::kDecodeRows for two tokens; from three tokens on, formats whose
// decoded step takes many registers set K::kSmallBatchRows (fewer rows), so that the decoded
// weights and every token's sums stay in registers.
template <class K, int D>
void small_batch_with(const uint8_t* weights, int64_t weight_row_bytes, int64_t rows, const uint8_t* activations,
                      int64_t act_row_bytes, int64_t n, int64_t k, float* y, int64_t y_stride) {
  int64_t r = 0;
  for (; r + D <= rows; r += D) {
    small_batch_rows<K, D>(weights + r * weight_row_bytes, weight_row_bytes, activations, act_row_bytes, n, k, y + r,
                           y_stride);
  }
  for (; r < rows; ++r) {
    small_batch_rows<K, 1>(weights + r * weight_row_bytes, weight_row_bytes, activations, act_row_bytes, n, k, y + r,
                           y_stride);
  }
}

template <class K>
void small_batch(const uint8_t* weights, int64_t weight_row_bytes, int64_t rows, const uint8_t* activations,
                 int64_t act_row_bytes, int64_t n, int64_t k, float* y, int64_t y_stride) {
  if constexpr (requires { K::kSmallBatchRows; }) {
    if (n > 2) {
      small_batch_with<K, K::kSmallBatchRows>(weights, weight_row_bytes, rows, activations, act_row_bytes, n, k, y,
                                              y_stride);
      return;
    }
  }
  small_batch_with<K, K::kDecodeRows>(weights, weight_row_bytes, rows, activations, act_row_bytes, n, k, y, y_stride);
}

// The MatmulTileFn of format K (see kernels.h).
template <class K>
void matmul_tile(const uint8_t* weights, int64_t weight_row_bytes, int64_t rows,
                 const uint8_t* activations, int64_t act_row_bytes, int64_t n, int64_t k, float* y,
                 int64_t y_stride) {
  if (n == 1) {
    constexpr int D = K::kDecodeRows;
    int64_t r = 0;
    for (; r + D <= rows; r += D) {
      micro_tile<K, D, 1>(weights + r * weight_row_bytes, weight_row_bytes, activations,
                          act_row_bytes, k, y + r, y_stride);
    }
    for (; r < rows; ++r) {
      micro_tile<K, 1, 1>(weights + r * weight_row_bytes, weight_row_bytes, activations,
                          act_row_bytes, k, y + r, y_stride);
    }
    return;
  }
  if (n <= kSmallBatchTokens) {
    small_batch<K>(weights, weight_row_bytes, rows, activations, act_row_bytes, n, k, y, y_stride);
    return;
  }
  if constexpr (requires { K::kPackSteps; }) {
    if (n >= K::kTokens) {
      matmul_packed<K>(weights, weight_row_bytes, rows, activations, act_row_bytes, n, k, y, y_stride);
      return;
    }
  }
  constexpr int R = K::kRows;
  int64_t block = kTokenBlockBytes / (act_row_bytes > 0 ? act_row_bytes : 1);
  block = block < K::kTokens ? K::kTokens : block / K::kTokens * K::kTokens;
  for (int64_t t0 = 0; t0 < n; t0 += block) {
    const int64_t nt = n - t0 < block ? n - t0 : block;
    const uint8_t* a = activations + t0 * act_row_bytes;
    float* yb = y + t0 * y_stride;
    int64_t r = 0;
    for (; r + R <= rows; r += R) {
      rows_by_tokens<K, R>(weights + r * weight_row_bytes, weight_row_bytes, a, act_row_bytes, nt,
                           k, yb + r, y_stride);
    }
    for (; r < rows; ++r) {
      rows_by_tokens<K, 1>(weights + r * weight_row_bytes, weight_row_bytes, a, act_row_bytes, nt,
                           k, yb + r, y_stride);
    }
  }
}

}  // namespace
}  // namespace kestrel::cpu
