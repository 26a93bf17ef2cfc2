// Kernel-table selection: CPUID picks the widest ISA, KESTREL_ISA may force a narrower one.
#include "backend/cpu/kernels.h"

#include <cstdlib>
#include <string>

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/kernels_isa.h"
#include "core/error.h"

namespace kestrel::cpu {
namespace {

template <const FormatKernels* (*... Families)(DType)>
const FormatKernels* first_of(DType type) {
  const FormatKernels* found = nullptr;
  ((found = found != nullptr ? found : Families(type)), ...);
  return found;
}

constexpr KernelTable kScalarTable{Isa::Scalar, "scalar", scalar_format_kernels, &kScalarAttention,
                                   &kScalarActivations};
#if defined(__x86_64__)
constexpr auto avx2_format_kernels = first_of<avx2_float_kernels, avx2_q8_0_kernels, avx2_q4_0_kernels, avx2_q8_kernels,
                                              avx2_kquant_kernels, avx2_iq4_kernels, avx2_iq3_kernels, avx2_iq_grid_kernels,
                                              avx2_ternary_kernels, avx2_mxfp4_kernels, avx2_w8a8_kernels>;
constexpr auto avx512_format_kernels =
    first_of<avx512_float_kernels, avx512_q8_kernels, avx512_kquant_kernels, avx512_iq_kernels,
             avx2_iq4_kernels, avx2_iq3_kernels, avx2_iq_grid_kernels, avx2_ternary_kernels, avx2_mxfp4_kernels,
             avx512_w8a8_kernels>;

// IQ3_S's AVX2 kernel is bound by its grid gathers (about 12 cycles each on Zen 3); its values as
// 4-bit levels (IQ3_S_L4, 22% more bytes) need none (docs/PERFORMANCE.md). The AVX-512 table keeps
// IQ3_S (its kernel not measured against the re-encoding).
DType avx2_compute_encoding(DType stored) { return stored == DType::IQ3_S ? DType::IQ3_S_L4 : stored; }

constexpr KernelTable kAvx2Table{Isa::Avx2, "avx2", avx2_format_kernels, &kAvx2Attention, &kAvx2Activations,
                                 avx2_compute_encoding};
// The activations stay on AVX2 code (a small share of a step).
constexpr KernelTable kAvx512Table{Isa::Avx512, "avx512", avx512_format_kernels, &kAvx512Attention,
                                   &kAvx2Activations};
#endif

bool supported(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return true;
    case Isa::Avx2:
      return cpu_features().has_avx2_set();
    case Isa::Avx512:
      return cpu_features().has_avx512_set();
  }
  return false;
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return "scalar";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
  }
  return "?";
}

const KernelTable* kernels_for(Isa isa) {
  if (!supported(isa)) return nullptr;
  switch (isa) {
    case Isa::Scalar:
      return &kScalarTable;
#if defined(__x86_64__)
    case Isa::Avx2:
      return &kAvx2Table;
    case Isa::Avx512:
      return &kAvx512Table;
#endif
    default:
      return nullptr;
  }
}

Isa best_isa() {
  if (supported(Isa::Avx512)) return Isa::Avx512;
  if (supported(Isa::Avx2)) return Isa::Avx2;
  return Isa::Scalar;
}

const KernelTable& active_kernels() {
  const char* forced = std::getenv("KESTREL_ISA");
  if (forced == nullptr || *forced == '\0') return *kernels_for(best_isa());
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (isa_name(isa) != forced) continue;
    if (const KernelTable* table = kernels_for(isa)) return *table;
    fail("KESTREL_ISA={} but this CPU cannot run it (it has: {}); use one of scalar{}{}", forced,
         cpu_features().describe(), supported(Isa::Avx2) ? ", avx2" : "",
         supported(Isa::Avx512) ? ", avx512" : "");
  }
  fail("KESTREL_ISA={} is not an ISA Kestrel knows (scalar, avx2, avx512)", forced);
}

const FormatKernels* find_kernels(const KernelTable& table, DType weight_type) {
  if (const FormatKernels* kernels = table.for_weights(weight_type)) return kernels;
  return scalar_format_kernels(weight_type);
}

}  // namespace kestrel::cpu
