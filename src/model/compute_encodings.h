// Load-time re-encoding of a model's matrices into the types the CPU kernels compute fastest
// (backend.h: cpu_compute_encoding; today IQ3_S as IQ3_S_L4 on AVX2). The re-encodings are exact
// (quant::transcode_blocks: every value unchanged, so logits are too), at the cost of the new
// type's size in memory of the model's own; the file's mapping is no longer read for them.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/large_buffer.h"
#include "model/model.h"

namespace kestrel {

struct ComputeEncodingSummary {
  int64_t matrices = 0;       // re-encoded
  int64_t bytes_before = 0;   // their bytes in the stored types
  int64_t bytes_after = 0;    // and in the compute encodings
};

// Re-encodes every layer matrix (for_each_layer_matrix) and the output head
// whose type has a compute encoding, into buffers appended to `owned`, and points the views at
// them (input orders kept). The token embedding, a lookup table, keeps its type unless it is the
// head too (tied), when both views point at the re-encoded table.
// `release(data, bytes)` is then called for each re-encoded matrix's old bytes (the file mapping's
// pages can go: only the new copy is read).
ComputeEncodingSummary adopt_compute_encodings(ModelWeights& weights, std::vector<LargeBuffer>& owned,
                                               const std::function<void(const void*, size_t)>& release = {});

}  // namespace kestrel
