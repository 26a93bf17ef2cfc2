// Internal to src/backend/cpu: each ISA's kernels per format family, defined in the per-ISA files
// and gathered into KernelTables by kernels.cpp. Each returns null for a type it does not handle.
// The SIMD ones may only be called once CPUID says the ISA is present (kernels_for checks).
#pragma once

#include "backend/cpu/kernels.h"

namespace kestrel::cpu {

const FormatKernels* scalar_format_kernels(DType weight_type);  // kernels_scalar.cpp

const FormatKernels* avx2_float_kernels(DType weight_type);     // kernels_float_avx2.cpp
const FormatKernels* avx2_q8_kernels(DType weight_type);        // kernels_q8_avx2.cpp
const FormatKernels* avx2_q8_0_kernels(DType weight_type);      // kernels_q8_0_avx2.cpp
const FormatKernels* avx2_q4_0_kernels(DType weight_type);      // kernels_q4_0_avx2.cpp
const FormatKernels* avx2_kquant_kernels(DType weight_type);    // kernels_kquant_avx2.cpp (all k-quants)
const FormatKernels* avx2_kquant16_kernels(DType weight_type);  // kernels_kquant16_avx2.cpp (Q6_K, Q3_K, Q2_K)
const FormatKernels* avx2_iq4_kernels(DType weight_type);       // kernels_iq4_avx2.cpp
const FormatKernels* avx2_iq3_kernels(DType weight_type);       // kernels_iq3_avx2.cpp
const FormatKernels* avx2_iq_grid_kernels(DType weight_type);   // kernels_iq_grid_avx2.cpp
const FormatKernels* avx2_ternary_kernels(DType weight_type);   // kernels_ternary_avx2.cpp
const FormatKernels* avx2_mxfp4_kernels(DType weight_type);     // kernels_mxfp4_avx2.cpp
const FormatKernels* avx2_w8a8_kernels(DType weight_type);      // kernels_w8a8_avx2.cpp
const FormatKernels* avx512_w8a8_kernels(DType weight_type);    // kernels_w8a8_avx512.cpp

const FormatKernels* avx512_float_kernels(DType weight_type);   // kernels_float_avx512.cpp
const FormatKernels* avx512_q8_kernels(DType weight_type);      // kernels_q8_avx512.cpp
const FormatKernels* avx512_kquant_kernels(DType weight_type);  // kernels_kquant_avx512.cpp
const FormatKernels* avx512_iq_kernels(DType weight_type);      // kernels_iq_avx512.cpp

}  // namespace kestrel::cpu
