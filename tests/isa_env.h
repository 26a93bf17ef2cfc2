// Sets KESTREL_ISA for a scope (nullptr: unset) and restores it after: the CPU backend picks its
// kernel table when constructed, so a backend made inside the scope runs that ISA.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"

namespace kestrel::test {

class IsaEnv {
 public:
  explicit IsaEnv(const char* value) {
    if (const char* old = std::getenv("KESTREL_ISA")) saved_ = old;
    had_ = std::getenv("KESTREL_ISA") != nullptr;
    if (value != nullptr) {
      setenv("KESTREL_ISA", value, 1);
    } else {
      unsetenv("KESTREL_ISA");
    }
  }
  ~IsaEnv() {
    if (had_) {
      setenv("KESTREL_ISA", saved_.c_str(), 1);
    } else {
      unsetenv("KESTREL_ISA");
    }
  }
  IsaEnv(const IsaEnv&) = delete;
  IsaEnv& operator=(const IsaEnv&) = delete;

 private:
  std::string saved_;
  bool had_ = false;
};

// Every ISA this machine runs, narrowest first.
inline std::vector<cpu::Isa> supported_isas() {
  std::vector<cpu::Isa> isas;
  for (cpu::Isa isa : {cpu::Isa::Scalar, cpu::Isa::Avx2, cpu::Isa::Avx512}) {
    if (cpu::kernels_for(isa) != nullptr) isas.push_back(isa);
  }
  return isas;
}

}  // namespace kestrel::test
