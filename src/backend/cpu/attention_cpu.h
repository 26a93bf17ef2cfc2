// Paged attention on the CPU, FlashAttention style: K/V are streamed chunk by chunk from the
// paged cache with an online softmax, so no score matrix is ever materialised. K and V are read
// in the cache's types (core/kv_spec.h): each chunk of kChunkTokens positions (from however many
// blocks hold them) is decoded, for one KV head, into an L1/L2 buffer that serves every query of
// the tile and every query head of the GQA group; never a whole-cache F32 copy.
//
// Work is cut into items of (query tile, KV head, context partition):
// - a query tile is up to kTileTokens consecutive tokens of one sequence (a prefill chunk), so
//   each K/V block read from memory serves every query of the tile and every query head of the
//   GQA group;
// - a partition is kPartitionTokens positions of the context. Each partition gives a partial
//   (max, sum, weighted V) that is merged into the result in partition order. Long decode
//   contexts are split across threads by partition (flash-decoding); other work keeps an item's
//   partitions on one thread. Only partitions some query of the tile sees are visited (a sliding
//   window or a rolling window with sinks skips the rest).
// Either way the arithmetic per token is the same sequence of operations, fixed by the token's
// absolute position — so a token's output never depends on the batch around it, on chunking, or
// on whether it is computed in prefill or in decode.
//
// Attention sinks (PagedAttentionArgs): a token whose window has moved scores the sinks with its
// query rotated back by the shift, in a segment of its own before the recent keys.
#pragma once

#include "backend/backend.h"
#include "core/thread_pool.h"

namespace kestrel::cpu {

struct AttentionKernels;

inline constexpr int kTileTokens = 8;
inline constexpr int kPartitionTokens = 512;
inline constexpr int kChunkTokens = 64;  // keys decoded and scored together (divides kPartitionTokens)

void paged_attention(ThreadPool& pool, const AttentionKernels& kernels, const PagedAttentionArgs& args,
                     const float* q, const KvLayerView& cache, float* out);

}  // namespace kestrel::cpu
