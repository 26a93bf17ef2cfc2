// Scalar reference kernels of every format in the WeightFormat table (quant/format.h), grouped by
// family and file. Internal to src/quant: other modules reach them through find_format().
//
// Every file that defines these kernels turns floating-point contraction off by including
// quant/no_fp_contract.h last (`#pragma GCC optimize("fp-contract=off")`, or
// `#pragma clang fp contract(off)` under clang): Release builds
// target FMA hardware and the compiler would otherwise fuse a * b + c into one rounding,
// so Debug and Release would quantize to different bytes and dequantize to different floats. With
// each product rounded on its own the references are defined op by op, agree across build types,
// and dequantize bitwise like GGML's reference code and gguf-py.
#pragma once

#include <cstdint>

namespace kestrel::quant::ref {

// Rounds to the nearest integer, ties to even, for |v| < 2^22: adding 1.5 * 2^23 leaves the
// integer part in the mantissa under the default rounding mode. Plain float adds, so loops that
// use it vectorize.
inline float round_nearest(float v) { return (v + 12582912.0f) - 12582912.0f; }

// Q8_1 (format_reference.cpp): activation format of the asymmetric INT4 types.
void quantize_row_q8_1(const float* src, void* dst, int64_t n);
void dequantize_row_q8_1(const void* src, float* dst, int64_t n);
float vec_dot_q8_1_q8_1(const void* w, const void* a, int64_t n);

// Q4_1, Q5_0, Q5_1 (legacy_quants.cpp).
void quantize_row_q4_1(const float* src, void* dst, int64_t n);
void dequantize_row_q4_1(const void* src, float* dst, int64_t n);
float vec_dot_q4_1_q8_1(const void* w, const void* a, int64_t n);
void quantize_row_q5_0(const float* src, void* dst, int64_t n);
// With importance weights (llama-quantize --imatrix's Q5_0): the best of 19 scales per block.
void quantize_row_q5_0_weighted(const float* src, void* dst, int64_t n, const float* importance);
void dequantize_row_q5_0(const void* src, float* dst, int64_t n);
float vec_dot_q5_0_q8_0(const void* w, const void* a, int64_t n);
void quantize_row_q5_1(const float* src, void* dst, int64_t n);
void dequantize_row_q5_1(const void* src, float* dst, int64_t n);
float vec_dot_q5_1_q8_1(const void* w, const void* a, int64_t n);

// k-quants (kquants_quantize.cpp: quantizers; kquants_reference.cpp: the rest).
void quantize_row_q4_K(const float* src, void* dst, int64_t n);
void quantize_row_q5_K(const float* src, void* dst, int64_t n);
void quantize_row_q6_K(const float* src, void* dst, int64_t n);
void quantize_row_q3_K(const float* src, void* dst, int64_t n);
void quantize_row_q2_K(const float* src, void* dst, int64_t n);
// The same with an importance weight per value (the imatrix's per-column means, one per element of
// the row): the searches minimise the weighted squared error, as llama.cpp's imatrix quantizers do.
void quantize_row_q4_K_weighted(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_q5_K_weighted(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_q6_K_weighted(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_q3_K_weighted(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_q2_K_weighted(const float* src, void* dst, int64_t n, const float* importance);
void dequantize_row_q4_K(const void* src, float* dst, int64_t n);
void dequantize_row_q5_K(const void* src, float* dst, int64_t n);
void dequantize_row_q6_K(const void* src, float* dst, int64_t n);
void dequantize_row_q3_K(const void* src, float* dst, int64_t n);
void dequantize_row_q2_K(const void* src, float* dst, int64_t n);
float vec_dot_q4_K_q8_K(const void* w, const void* a, int64_t n);
float vec_dot_q5_K_q8_K(const void* w, const void* a, int64_t n);
float vec_dot_q6_K_q8_K(const void* w, const void* a, int64_t n);
float vec_dot_q3_K_q8_K(const void* w, const void* a, int64_t n);
float vec_dot_q2_K_q8_K(const void* w, const void* a, int64_t n);
void quantize_row_q8_K(const float* src, void* dst, int64_t n);
void dequantize_row_q8_K(const void* src, float* dst, int64_t n);
float vec_dot_q8_K_q8_K(const void* w, const void* a, int64_t n);

// llama.cpp's non-linear 4-bit formats (iq4_quants.cpp): IQ4_NL with Q8_0, IQ4_XS with Q8_K.
void quantize_row_iq4_nl(const float* src, void* dst, int64_t n);
void quantize_row_iq4_nl_weighted(const float* src, void* dst, int64_t n, const float* importance);
void dequantize_row_iq4_nl(const void* src, float* dst, int64_t n);
float vec_dot_iq4_nl_q8_0(const void* w, const void* a, int64_t n);
void quantize_row_iq4_xs(const float* src, void* dst, int64_t n);
void quantize_row_iq4_xs_weighted(const float* src, void* dst, int64_t n, const float* importance);
void dequantize_row_iq4_xs(const void* src, float* dst, int64_t n);
float vec_dot_iq4_xs_q8_K(const void* w, const void* a, int64_t n);

// llama.cpp's grid formats (iq_grid_quants.cpp), Q8_K activations, no quantizer.
// Quantizers (iq_grid_quantize.cpp): the unweighted ones for tests; `kestrel quantize` requires an
// importance matrix for these types, as llama-quantize does.
void quantize_row_iq2_xxs(const float* src, void* dst, int64_t n);
void quantize_row_iq2_xxs_weighted(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_iq2_xs(const float* src, void* dst, int64_t n);
void quantize_row_iq2_xs_weighted(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_iq2_s(const float* src, void* dst, int64_t n);
void quantize_row_iq2_s_weighted(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_iq1_s(const float* src, void* dst, int64_t n);
void quantize_row_iq1_s_weighted(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_iq1_m(const float* src, void* dst, int64_t n);
void quantize_row_iq1_m_weighted(const float* src, void* dst, int64_t n, const float* importance);
void dequantize_row_iq2_xxs(const void* src, float* dst, int64_t n);
void dequantize_row_iq2_xs(const void* src, float* dst, int64_t n);
void dequantize_row_iq2_s(const void* src, float* dst, int64_t n);
void dequantize_row_iq1_s(const void* src, float* dst, int64_t n);
void dequantize_row_iq1_m(const void* src, float* dst, int64_t n);
float vec_dot_iq2_xxs_q8_K(const void* w, const void* a, int64_t n);
float vec_dot_iq2_xs_q8_K(const void* w, const void* a, int64_t n);
float vec_dot_iq2_s_q8_K(const void* w, const void* a, int64_t n);
float vec_dot_iq1_s_q8_K(const void* w, const void* a, int64_t n);
float vec_dot_iq1_m_q8_K(const void* w, const void* a, int64_t n);
// llama.cpp's ternary formats (ternary_quants.cpp), with Q8_K; MXFP4 (mxfp4_quants.cpp), with Q8_0.
void quantize_row_tq1_0(const float* src, void* dst, int64_t n);
void dequantize_row_tq1_0(const void* src, float* dst, int64_t n);
float vec_dot_tq1_0_q8_K(const void* w, const void* a, int64_t n);
void quantize_row_tq2_0(const float* src, void* dst, int64_t n);
void dequantize_row_tq2_0(const void* src, float* dst, int64_t n);
float vec_dot_tq2_0_q8_K(const void* w, const void* a, int64_t n);
void quantize_row_mxfp4(const float* src, void* dst, int64_t n);
void dequantize_row_mxfp4(const void* src, float* dst, int64_t n);
float vec_dot_mxfp4_q8_0(const void* w, const void* a, int64_t n);
// llama.cpp's 3-bit grid formats with Q8_K activations (iq3_quants.cpp; quantizers in
// iq3_quantize.cpp).
void quantize_row_iq3_xxs(const float* src, void* dst, int64_t n);
void quantize_row_iq3_xxs_weighted(const float* src, void* dst, int64_t n, const float* importance);
void dequantize_row_iq3_xxs(const void* src, float* dst, int64_t n);
float vec_dot_iq3_xxs_q8_K(const void* w, const void* a, int64_t n);
void quantize_row_iq3_s(const float* src, void* dst, int64_t n);
void quantize_row_iq3_s_weighted(const float* src, void* dst, int64_t n, const float* importance);
void dequantize_row_iq3_s(const void* src, float* dst, int64_t n);
float vec_dot_iq3_s_q8_K(const void* w, const void* a, int64_t n);

// Kestrel's integer formats (int_formats.cpp).
void quantize_row_int8_pc(const float* src, void* dst, int64_t n);
void dequantize_row_int8_pc(const void* src, float* dst, int64_t n);
float vec_dot_int8_pc_q8_0(const void* w, const void* a, int64_t n);
float vec_dot_int8_pc_int8_pc(const void* w, const void* a, int64_t n);  // W8A8
template <int G>
void quantize_row_int4_sym(const float* src, void* dst, int64_t n);
template <int G>
void dequantize_row_int4_sym(const void* src, float* dst, int64_t n);
template <int G>
float vec_dot_int4_sym_q8_0(const void* w, const void* a, int64_t n);

// The per-value weights llama.cpp's quantizers fit with an importance matrix (kquants_quantize.cpp):
// w_i = importance_i * sqrt(sigma^2 + x_i^2), sigma^2 twice the mean square of the n values.
void importance_weights(const float* x, int n, const float* importance, float* w);

// IQ3_S_L4 (iq3_levels.cpp): IQ3_S's quantizers then the re-encoding; the dot with Q8_K.
void quantize_row_iq3_s_l4(const float* src, void* dst, int64_t n);
void quantize_row_iq3_s_l4_weighted(const float* src, void* dst, int64_t n, const float* importance);
void dequantize_row_iq3_s_l4(const void* src, float* dst, int64_t n);
float vec_dot_iq3_s_l4_q8_K(const void* w, const void* a, int64_t n);

// NF4 (nf4_quants.cpp): bitsandbytes' quantizer, an importance-weighted one, the dot with Q8_0.
void quantize_row_nf4(const float* src, void* dst, int64_t n);
void quantize_row_nf4_weighted(const float* src, void* dst, int64_t n, const float* importance);
void dequantize_row_nf4(const void* src, float* dst, int64_t n);
float vec_dot_nf4_q8_0(const void* w, const void* a, int64_t n);

// INT4 / INT3 / INT2 asymmetric per group (int_asym_formats.cpp), Bits = 4, 3 or 2.
template <int G, int Bits>
void quantize_row_int_asym(const float* src, void* dst, int64_t n);
template <int G, int Bits>
void dequantize_row_int_asym(const void* src, float* dst, int64_t n);
template <int G, int Bits>
float vec_dot_int_asym_q8_1(const void* w, const void* a, int64_t n);

// INT4 with an integer zero point per group (int_asym_formats.cpp), G = 32, 64 or 128.
template <int G>
void quantize_row_int4_zp(const float* src, void* dst, int64_t n);
template <int G>
void dequantize_row_int4_zp(const void* src, float* dst, int64_t n);
template <int G>
float vec_dot_int4_zp_q8_1(const void* w, const void* a, int64_t n);

// FP8 E4M3 per channel (fp8.cpp).
void quantize_row_fp8_e4m3_pc(const float* src, void* dst, int64_t n);
void dequantize_row_fp8_e4m3_pc(const void* src, float* dst, int64_t n);
float vec_dot_fp8_e4m3_pc_f32(const void* w, const void* a, int64_t n);

}  // namespace kestrel::quant::ref
