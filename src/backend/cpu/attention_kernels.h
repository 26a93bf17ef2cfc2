// The per-ISA inner loops of paged attention (attention_cpu.cpp drives them over blocks, tiles and
// partitions) and of the gated-MLP activations. Each KernelTable (kernels.h) points at one set.
//
// Contract every ISA keeps (tests/unit/backend_ops_test.cpp checks it):
//  - block_scores gives key i the same arithmetic whatever i, count or the other keys are (a
//    key's score never depends on where a block or a query's visible range starts);
//  - exp_shifted_sum's exp of an element does not depend on its position; its sum is a fixed
//    function of (values, count);
//  - block_accumulate updates each element as acc = acc * correction, then one FMA per key in key
//    order;
//  - a decoder gives exactly quant/'s reference dequantize_row values (the conversions are exact
//    or a single rounding of scale * value), so every ISA reads the same K and V.
// Together these keep a token's attention output independent of its batch, chunking or thread.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace kestrel::cpu {

// Converts `count` rows of head_dim values of one KV type to F32: row i is read at
// src + i * src_stride (bytes) and written at dst + i * head_dim.
using KvDecodeFn = void (*)(const uint8_t* src, int64_t src_stride, int count, int head_dim, float* dst);

struct AttentionKernels {
  // scores[i] = (q . k_i) * scale for i < count, k_i = k + i * stride floats, head_dim hd;
  // returns the largest score.
  float (*block_scores)(const float* q, const float* k, int64_t stride, int count, int hd, float scale,
                        float* scores);
  // x[i] = exp(x[i] - shift) for i < count; returns their sum.
  float (*exp_shifted_sum)(float* x, float shift, int count);
  // acc[0, hd) = acc * correction + sum_i w[i] * v_i, v_i = v + i * stride floats, in key order.
  void (*block_accumulate)(float* acc, float correction, const float* w, const float* v, int64_t stride,
                           int count, int hd);
  // The decoder of a KV type (F32: a copy); null for a type that is not a KV type.
  KvDecodeFn (*decoder)(DType type);
};

struct ActivationKernels {
  // out[i] = silu(gate[i]) * up[i]; out may alias gate or up.
  void (*silu_mul)(const float* gate, const float* up, int64_t count, float* out);
  // out[i] = gelu_tanh(gate[i]) * up[i].
  void (*gelu_mul)(const float* gate, const float* up, int64_t count, float* out);
};

extern const AttentionKernels kScalarAttention;    // attention_kernels_scalar.cpp
extern const ActivationKernels kScalarActivations;
#if defined(__x86_64__)
extern const AttentionKernels kAvx2Attention;      // attention_kernels_avx2.cpp
extern const ActivationKernels kAvx2Activations;
extern const AttentionKernels kAvx512Attention;    // attention_kernels_avx512.cpp
#endif

}  // namespace kestrel::cpu
