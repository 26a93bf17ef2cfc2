// The CPU's per-ISA kernel tables. For each weight format a table gives the matrix kernel, which
// dots a tile of weight rows with a batch of activation rows, and the converter that prepares
// activation rows for it. Tables exist per ISA (scalar reference, AVX2, AVX-512); one is chosen at
// run time from CPUID, or forced with KESTREL_ISA=scalar|avx2|avx512, so one binary runs on any
// x86-64-v3 machine. Off x86 only the scalar table exists. Besides the matrix kernels, each table
// carries its ISA's attention and activation kernels (attention_kernels.h), so KESTREL_ISA=scalar
// runs no SIMD intrinsics at all.
//
// Activation rows: every table converts F32 activations to its own row layout once per matmul
// call (FormatKernels::convert_activations), and only that table's matmul_tile reads the result.
// The values are always those of the format's reference activation type (quant/format.h: F16 for
// F16 weights, Q8_0 for Q8_0/Q4_0, Q8_K for k-quants, ...) with the same rounding, but SIMD
// tables may store them reordered, widened (F16 values as F32), zero-padded to a whole vector, or
// with per-block sums precomputed.
//
// Contract every kernel keeps (tests/unit/backend_ops_test.cpp checks it for every ISA):
//  1. For each (row, token) the result equals the scalar reference — quant's vec_dot of the weight
//     row with the reference-converted activation row — within the format's stated tolerance
//     (kernels differ from it only in the order floats are added).
//  2. It is bitwise the same whatever `rows`, `n`, the row's position in the tile, the token's
//     position in the batch, or the thread count: each (row, token) dot is computed by the same
//     sequence of operations as the one-token path. A token's output never depends on what else
//     is in the batch, which is what makes batching and prefix caching exact.
// Results from different ISAs differ in the last bits; a process uses one table throughout.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/dtype.h"

namespace kestrel::cpu {

// y[t * y_stride + r] = dot(weight row r, activation row t) for r < rows, t < n; k elements each
// (k a multiple of the weight format's block size). Weight rows are `weight_row_bytes` apart,
// activation rows (as written by convert_activations) `act_row_bytes` apart.
using MatmulTileFn = void (*)(const uint8_t* weights, int64_t weight_row_bytes, int64_t rows,
                              const uint8_t* activations, int64_t act_row_bytes, int64_t n,
                              int64_t k, float* y, int64_t y_stride);
// Converts one row of k floats into `out`, activation_row_bytes(k) bytes.
using ConvertRowFn = void (*)(const float* x, uint8_t* out, int64_t k);

struct FormatKernels {
  DType weight_type = DType::F32;
  // Size of one converted activation row of k elements.
  int64_t (*activation_row_bytes)(int64_t k) = nullptr;
  ConvertRowFn convert_activations = nullptr;
  MatmulTileFn matmul_tile = nullptr;
  // Row chunks per thread for one token (CpuBackend::chunk_rows): 1 for memory-bound decode (one
  // contiguous stream per thread reads best); more where the kernel's decode is bound by its own
  // arithmetic, so threads that a shared machine slows leave chunks to the others.
  int64_t decode_chunks_per_thread = 1;
};

enum class Isa { Scalar, Avx2, Avx512 };

struct AttentionKernels;
struct ActivationKernels;

struct KernelTable {
  Isa isa = Isa::Scalar;
  std::string_view name;
  // Kernels for a weight format, or nullptr when this ISA has none (the caller falls back to the
  // scalar table, which covers every format quant/ has a reference for).
  const FormatKernels* (*for_weights)(DType weight_type) = nullptr;
  // Paged attention's inner loops and K/V decoders, and the gated-MLP activations
  // (attention_kernels.h); every table has both.
  const AttentionKernels* attention = nullptr;
  const ActivationKernels* activations = nullptr;
  // The type this ISA's kernels would rather compute a stored weight type in (an exact re-encoding
  // with faster kernels, quant::can_transcode), or null / the type itself: keep it.
  DType (*compute_encoding)(DType stored) = nullptr;
};

// The table KESTREL_ISA names (read on every call), else the widest this CPU runs. Throws a
// kestrel::Error if KESTREL_ISA is unknown or names an ISA this CPU lacks. Never null.
const KernelTable& active_kernels();
// A specific ISA's table, or null if this CPU cannot run it.
const KernelTable* kernels_for(Isa isa);
// The widest ISA this CPU runs.
Isa best_isa();
std::string_view isa_name(Isa isa);

// The kernels `table` uses for `weight_type`: its own, else the scalar reference's; null if no
// table has the format.
const FormatKernels* find_kernels(const KernelTable& table, DType weight_type);

}  // namespace kestrel::cpu
