// What rank 0 broadcasts to every other rank each step: the ForwardBatch (token ids, positions,
// block tables, slot mappings, logits rows) as a flat byte message - never embeddings or logits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "model/forward_batch.h"

namespace kestrel {

enum class StepKind : uint64_t { Step = 1, Stop = 2 };

// The fixed-size part, broadcast first: what comes and how long its payload is.
struct StepHeader {
  StepKind kind = StepKind::Stop;
  uint64_t payload_bytes = 0;
};

std::vector<std::byte> encode_forward_batch(const ForwardBatch& batch);
// Throws kestrel::Error on a payload that does not parse (a mismatched build would send one).
ForwardBatch decode_forward_batch(std::span<const std::byte> payload);

// Tokens [begin, end) of `batch` as a batch of their own (same block tables; slot mappings and
// logits rows cut to the range): a pipeline micro-batch. Attention reads earlier tokens through
// the cache, so pieces run in order give the whole batch's results.
ForwardBatch slice_forward_batch(const ForwardBatch& batch, int64_t begin, int64_t end);

}  // namespace kestrel
