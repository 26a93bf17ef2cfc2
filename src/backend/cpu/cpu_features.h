// What this x86-64 CPU can run, from CPUID and XGETBV (the OS must also save the wider register
// state, or the instructions fault). Read once per process; the kernel tables (kernels.h) are
// chosen from it.
#pragma once

#include <string>

namespace kestrel::cpu {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512vnni = false;
  bool avx512vbmi = false;
  bool avx512vbmi2 = false;
  bool avx512bitalg = false;
  bool avx512vpopcntdq = false;
  bool gfni = false;
  bool avx512bf16 = false;
  bool avx_vnni = false;
  bool amx_int8 = false;
  bool amx_bf16 = false;

  // Everything the AVX2 kernel table uses (the x86-64-v3 baseline the build targets).
  bool has_avx2_set() const { return avx2 && fma && f16c; }
  // Everything the *_avx512.cpp files are compiled for (src/CMakeLists.txt), so everything the
  // compiler may emit there: Ice Lake, Zen 4 and later (Skylake-X and Cascade Lake lack VBMI).
  // GFNI (every one of those has it) extracts nibbles for the k-quant kernels.
  bool has_avx512_set() const {
    return has_avx2_set() && avx512f && avx512bw && avx512vl && avx512dq && avx512vnni && avx512vbmi &&
           avx512vbmi2 && avx512bitalg && avx512vpopcntdq && gfni;
  }
  // "avx2 fma f16c avx512f ..." for logs and error messages.
  std::string describe() const;
};

// This CPU's features (detected on first call).
const CpuFeatures& cpu_features();

}  // namespace kestrel::cpu
