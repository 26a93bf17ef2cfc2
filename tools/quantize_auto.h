// `kestrel quantize IN OUT auto --target-bpw B | --target-size GIB --calib TEXT`: one type per
// matrix chosen under a size budget from measured sensitivities (engine/tensor_sensitivity.h,
// calib/mixed_precision.h), written with the importance matrix's weighted quantizers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "convert/imatrix_file.h"
#include "core/dtype.h"

namespace kestrel::cli {

struct AutoQuantizeOptions {
  std::string input, output, calib;
  double target_bpw = 0;       // > 0: bits per weight over the quantized matrices
  double target_size_gib = 0;  // > 0: the whole file's size
  std::string types = "Q3_K,Q4_K,Q5_K,Q6_K,Q8_0";  // the candidates, comma separated
  std::string probe = "Q3_K";
  int64_t ctx = 512;
  int64_t chunks = 4;  // calibration chunks each tensor's KLD is measured on
  int threads = 0;
};

// The options' own errors (the budget, the types), before anything slow runs; the parsed types.
struct AutoTypes {
  std::vector<DType> candidates;
  DType probe;
};
AutoTypes check_auto_options(const AutoQuantizeOptions& o);
void quantize_auto(const AutoQuantizeOptions& o, const ImportanceMatrix& imatrix);

}  // namespace kestrel::cli
