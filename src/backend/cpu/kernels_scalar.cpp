// The scalar kernel table: quant/'s reference kernels looped over the tile. It covers every format
// quant/ has a reference for and is what the SIMD tables are tested against.
#include "backend/cpu/kernels_isa.h"
#include "quant/format.h"

namespace kestrel::cpu {
namespace {

template <DType W>
const quant::WeightFormat& weight_format() {
  static const quant::WeightFormat& format = quant::require_format(W);
  return format;
}

template <DType W>
const quant::WeightFormat& activation_format() {
  static const quant::WeightFormat& format = quant::require_format(weight_format<W>().activation_type);
  return format;
}

template <DType W>
int64_t activation_row_bytes(int64_t k) {
  return quant::row_bytes(activation_format<W>(), k);
}

template <DType W>
void convert_activations(const float* x, uint8_t* out, int64_t k) {
  activation_format<W>().quantize_row(x, out, k);
}

template <DType W>
void matmul_tile(const uint8_t* weights, int64_t weight_row_bytes, int64_t rows,
                 const uint8_t* activations, int64_t act_row_bytes, int64_t n, int64_t k, float* y,
                 int64_t y_stride) {
  const quant::VecDotFn vec_dot = weight_format<W>().vec_dot;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t t = 0; t < n; ++t) {
      y[t * y_stride + r] =
          vec_dot(weights + r * weight_row_bytes, activations + t * act_row_bytes, k);
    }
  }
}

template <DType W>
const FormatKernels* kernels_if_known() {
  if (quant::find_format(W) == nullptr) return nullptr;
  static const FormatKernels kernels{W, activation_row_bytes<W>, convert_activations<W>,
                                     matmul_tile<W>};
  return &kernels;
}

// Every type quant/ may have a reference for (a test checks this list covers quant::all_formats).
template <DType... Types>
const FormatKernels* lookup(DType type) {
  const FormatKernels* found = nullptr;
  ((found = (found == nullptr && type == Types) ? kernels_if_known<Types>() : found), ...);
  return found;
}

}  // namespace

const FormatKernels* scalar_format_kernels(DType weight_type) {
  return lookup<DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                DType::Q5_0, DType::Q5_1, DType::Q8_1,
                DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K, DType::IQ4_NL, DType::IQ4_XS,
                DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S, DType::IQ1_S, DType::IQ1_M,
                DType::TQ1_0, DType::TQ2_0, DType::MXFP4,
                DType::IQ3_XXS, DType::IQ3_S, DType::IQ3_S_L4,
                DType::INT8_PC,
                DType::INT4_SYM_G32, DType::INT4_SYM_G64, DType::INT4_SYM_G128,
                DType::INT4_ASYM_G32, DType::INT4_ASYM_G64, DType::INT4_ASYM_G128,
                DType::INT3_ASYM_G64, DType::INT3_ASYM_G128, DType::INT2_ASYM_G64, DType::INT2_ASYM_G128, DType::NF4,
                DType::INT4_ZP_G32, DType::INT4_ZP_G64, DType::INT4_ZP_G128,
                DType::FP8_E4M3_PC, DType::W8A8>(weight_type);
}

}  // namespace kestrel::cpu
