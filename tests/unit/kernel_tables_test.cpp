// The CPU kernel tables (backend/cpu/kernels.h) and their selection: the scalar table covers every
// format, every SIMD table every weight format; the dispatcher picks the widest table CPUID and
// /proc/cpuinfo agree the CPU runs; KESTREL_ISA forces a table or fails clearly. (The kernels'
// results against the references are backend_ops_test.cpp's.)
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "backend/backend.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "isa_env.h"
#include "quant/format.h"

namespace kestrel {
namespace {

using cpu::Isa;
using cpu::KernelTable;
using quant::WeightFormat;
using test::IsaEnv;
using test::supported_isas;


TEST(KernelTables, ScalarTableCoversEveryFormat) {
  const KernelTable* scalar = cpu::kernels_for(Isa::Scalar);
  ASSERT_NE(scalar, nullptr);
  for (const WeightFormat& format : quant::all_formats()) {
    EXPECT_NE(scalar->for_weights(format.type), nullptr) << dtype_name(format.type);
    for (Isa isa : supported_isas()) {
      EXPECT_NE(cpu::find_kernels(*cpu::kernels_for(isa), format.type), nullptr);
    }
  }
}

// Every weight format (all but the activation-only Q8_1 and Q8_K) has kernels in every SIMD table.
TEST(KernelTables, SimdTablesHaveEveryWeightFormat) {
  for (Isa isa : supported_isas()) {
    if (isa == Isa::Scalar) continue;
    const KernelTable& table = *cpu::kernels_for(isa);
    for (const WeightFormat& format : quant::all_formats()) {
      if (format.type == DType::Q8_1 || format.type == DType::Q8_K) continue;
      EXPECT_NE(table.for_weights(format.type), nullptr) << table.name << " " << dtype_name(format.type);
    }
  }
}

// The dispatcher picks the table the CPU supports: CPUID's reading (cpu_features) agrees with the
// kernel's own flags in /proc/cpuinfo, and best_isa() is the widest table those flags allow.
TEST(KernelTables, DispatcherPicksTheTableTheCpuSupports) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) == 0) {
      flags = " " + line.substr(line.find(':') + 1) + " ";
      break;
    }
  }
  ASSERT_FALSE(flags.empty()) << "no flags line in /proc/cpuinfo";
  auto has = [&](const char* flag) { return flags.find(std::string(" ") + flag + " ") != std::string::npos; };
  const cpu::CpuFeatures& f = cpu::cpu_features();
  EXPECT_EQ(f.avx2, has("avx2"));
  EXPECT_EQ(f.fma, has("fma"));
  EXPECT_EQ(f.f16c, has("f16c"));
  EXPECT_EQ(f.avx512f, has("avx512f"));
  EXPECT_EQ(f.avx512bw, has("avx512bw"));
  EXPECT_EQ(f.avx512vbmi, has("avx512vbmi"));
  EXPECT_EQ(f.gfni, has("gfni"));
  const bool avx2_set = has("avx2") && has("fma") && has("f16c");
  const bool avx512_set = avx2_set && has("avx512f") && has("avx512bw") && has("avx512vl") && has("avx512dq") &&
                          has("avx512_vnni") && has("avx512vbmi") && has("avx512_vbmi2") && has("avx512_bitalg") &&
                          has("avx512_vpopcntdq") && has("gfni");
  EXPECT_EQ(cpu::kernels_for(Isa::Avx2) != nullptr, avx2_set);
  EXPECT_EQ(cpu::kernels_for(Isa::Avx512) != nullptr, avx512_set);
  EXPECT_EQ(cpu::best_isa(), avx512_set ? Isa::Avx512 : avx2_set ? Isa::Avx2 : Isa::Scalar);
  {
    IsaEnv env(nullptr);
    EXPECT_EQ(cpu::active_kernels().isa, cpu::best_isa());
  }
  // Every table carries its attention and activation kernels.
  for (Isa isa : supported_isas()) {
    EXPECT_NE(cpu::kernels_for(isa)->attention, nullptr) << cpu::isa_name(isa);
    EXPECT_NE(cpu::kernels_for(isa)->activations, nullptr) << cpu::isa_name(isa);
  }
  std::printf("CPU features: %s; best ISA: %s\n", f.describe().c_str(), std::string(cpu::isa_name(cpu::best_isa())).c_str());
}

TEST(KernelTables, KestrelIsaSelectsOrFailsClearly) {
  {
    IsaEnv env(nullptr);
    EXPECT_EQ(cpu::active_kernels().isa, cpu::best_isa());
  }
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    IsaEnv env(std::string(cpu::isa_name(isa)).c_str());
    if (cpu::kernels_for(isa) != nullptr) {
      EXPECT_EQ(cpu::active_kernels().isa, isa);
    } else {
      EXPECT_THROW(cpu::active_kernels(), Error) << cpu::isa_name(isa);
      EXPECT_THROW(make_cpu_backend(1), Error);
    }
  }
  IsaEnv env("sse9");
  try {
    cpu::active_kernels();
    FAIL() << "an unknown ISA must be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sse9"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kestrel
