// Seconds a forward step costs as a function of the tokens in it: the cost model speculative
// decoding decides with. Measured once at start-up (calibrate: steps of 1, 2, 4, ... tokens on a
// scratch sequence) and kept current from the steps the engine really runs (observe), since the
// machines drift. Between the measured sizes the cost is interpolated linearly, beyond the
// largest it is extrapolated from the last two.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "runner/model_runner.h"

namespace kestrel {

class StepCostModel {
 public:
  // Sizes 1, 2, 4, ... up to max_tokens.
  explicit StepCostModel(int64_t max_tokens = 256);

  // Times steps of one sequence of each size on `runner` (blocks from `kv`, given back after).
  // Sizes whose blocks are not free are skipped.
  void calibrate(ModelRunner& runner, KVCacheManager& kv, int64_t max_tokens);
  // A step of `num_tokens` took `seconds`: folds it into the nearest size's estimate.
  void observe(int64_t num_tokens, double seconds);
  double seconds(int64_t num_tokens) const;
  bool calibrated() const;

 private:
  struct Point {
    int64_t tokens;
    double seconds;  // < 0: not measured yet
  };
  std::vector<Point> points_;
};

}  // namespace kestrel
