#include "backend/cpu/cpu_features.h"

#include <cstdint>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace kestrel::cpu {
namespace {

#if defined(__x86_64__)
struct CpuidRegs {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
};

CpuidRegs cpuid(uint32_t leaf, uint32_t subleaf) {
  CpuidRegs r;
  __cpuid_count(leaf, subleaf, r.eax, r.ebx, r.ecx, r.edx);
  return r;
}

uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

bool bit(uint32_t value, int index) { return (value >> index) & 1u; }

CpuFeatures detect() {
  CpuFeatures f;
  const uint32_t max_leaf = cpuid(0, 0).eax;
  if (max_leaf < 1) return f;
  const CpuidRegs leaf1 = cpuid(1, 0);
  // The OS saves YMM state (XCR0 bits 1-2) and, for AVX-512, opmask + ZMM state (bits 5-7);
  // without that the instructions fault even when CPUID lists them. AMX tiles: bits 17-18.
  const bool osxsave = bit(leaf1.ecx, 27);
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool os_ymm = (xcr0 & 0x6) == 0x6;
  const bool os_zmm = os_ymm && (xcr0 & 0xe0) == 0xe0;
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;
  if (!os_ymm) return f;
  f.fma = bit(leaf1.ecx, 12);
  f.f16c = bit(leaf1.ecx, 29) && bit(leaf1.ecx, 28);  // F16C needs AVX
  if (max_leaf < 7) return f;
  const CpuidRegs leaf7 = cpuid(7, 0);
  f.avx2 = bit(leaf7.ebx, 5);
  if (os_zmm) {
    f.avx512f = bit(leaf7.ebx, 16);
    f.avx512dq = bit(leaf7.ebx, 17);
    f.avx512bw = bit(leaf7.ebx, 30);
    f.avx512vl = bit(leaf7.ebx, 31);
    f.avx512vbmi = bit(leaf7.ecx, 1);
    f.avx512vbmi2 = bit(leaf7.ecx, 6);
    f.avx512vnni = bit(leaf7.ecx, 11);
    f.avx512bitalg = bit(leaf7.ecx, 12);
    f.avx512vpopcntdq = bit(leaf7.ecx, 14);
    f.gfni = bit(leaf7.ecx, 8);
  }
  if (os_amx) {
    f.amx_bf16 = bit(leaf7.edx, 22);
    f.amx_int8 = bit(leaf7.edx, 25);
  }
  if (leaf7.eax >= 1) {
    const CpuidRegs leaf7_1 = cpuid(7, 1);
    f.avx_vnni = bit(leaf7_1.eax, 4);
    f.avx512bf16 = os_zmm && bit(leaf7_1.eax, 5);
  }
  return f;
}
#else
CpuFeatures detect() { return {}; }
#endif

}  // namespace

std::string CpuFeatures::describe() const {
  std::string out;
  auto add = [&](bool present, const char* name) {
    if (!present) return;
    if (!out.empty()) out += ' ';
    out += name;
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx_vnni, "avx-vnni");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512dq, "avx512dq");
  add(avx512vnni, "avx512vnni");
  add(avx512vbmi, "avx512vbmi");
  add(avx512vbmi2, "avx512vbmi2");
  add(avx512bitalg, "avx512bitalg");
  add(avx512vpopcntdq, "avx512vpopcntdq");
  add(gfni, "gfni");
  add(avx512bf16, "avx512bf16");
  add(amx_int8, "amx-int8");
  add(amx_bf16, "amx-bf16");
  return out.empty() ? "none" : out;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace kestrel::cpu
