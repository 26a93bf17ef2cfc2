// Paged attention on the CPU, FlashAttention style: K/V are streamed block by block from the
// paged cache with an online softmax, so no score matrix is ever materialised.
//
// Work is cut into items of (query tile, KV head, context partition):
// - a query tile is up to kTileTokens consecutive tokens of one sequence (a prefill chunk), so
//   each K/V block read from memory serves every query of the tile and every query head of the
//   GQA group;
// - a partition is kPartitionTokens positions of the context. Each partition gives a partial
//   (max, sum, weighted V) that is merged into the result in partition order. Long decode
//   contexts are split across threads by partition (flash-decoding); other work keeps an item's
//   partitions on one thread. Either way the arithmetic per token is the same sequence of
//   operations, fixed by the token's absolute position — so a token's output never depends on the
//   batch around it, on chunking, or on whether it is computed in prefill or in decode.
#pragma once

#include "backend/backend.h"
#include "core/thread_pool.h"

namespace kestrel::cpu {

inline constexpr int kTileTokens = 8;
inline constexpr int kPartitionTokens = 512;

void paged_attention(ThreadPool& pool, const PagedAttentionArgs& args, const float* q,
                     const KvLayerView& cache, float* out);

}  // namespace kestrel::cpu
