#include "spec/step_cost.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

namespace kestrel {
namespace {

// An id no real request gets (engines count up from 1).
constexpr RequestId kCalibrationRequest = std::numeric_limits<RequestId>::max();

}  // namespace

StepCostModel::StepCostModel(int64_t max_tokens) {
  for (int64_t n = 1; n <= max_tokens; n *= 2) points_.push_back({n, -1.0});
}

void StepCostModel::calibrate(ModelRunner& runner, KVCacheManager& kv, int64_t max_tokens) {
  const int64_t limit = std::min<int64_t>(max_tokens, points_.back().tokens);
  std::vector<TokenId> tokens(size_t(limit), 0);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = TokenId(i % 7 + 1);
  using Clock = std::chrono::steady_clock;
  bool warmed = false;
  for (Point& point : points_) {
    if (point.tokens > limit) break;
    if (!kv.allocate_slots(kCalibrationRequest, point.tokens)) break;
    SequenceChunk chunk;
    chunk.tokens = std::span<const TokenId>(tokens).first(size_t(point.tokens));
    for (int g = 0; g < kv.num_groups(); ++g) chunk.block_tables.push_back(kv.block_table(kCalibrationRequest, g));
    chunk.logits_from = 0;  // every row, as a verify step wants
    double best = std::numeric_limits<double>::infinity();
    for (int run = warmed ? 0 : -1; run < 2; ++run) {  // one warm-up run first, then the best of two
      const auto start = Clock::now();
      runner.execute(std::span<const SequenceChunk>(&chunk, 1));
      if (run >= 0) best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
    }
    warmed = true;
    point.seconds = best;
    kv.free(kCalibrationRequest);
  }
}

void StepCostModel::observe(int64_t num_tokens, double seconds) {
  auto nearest = points_.begin();
  for (auto it = points_.begin(); it != points_.end(); ++it) {
    if (std::abs(std::log2(double(it->tokens) / double(num_tokens))) <
        std::abs(std::log2(double(nearest->tokens) / double(num_tokens)))) {
      nearest = it;
    }
  }
  // Scale the observation to the point's size by the current curve's slope, then average in.
  const double here = this->seconds(num_tokens);
  const double scaled = here > 0.0 && nearest->seconds > 0.0 ? seconds * nearest->seconds / here : seconds;
  nearest->seconds = nearest->seconds < 0.0 ? scaled : 0.9 * nearest->seconds + 0.1 * scaled;
}

bool StepCostModel::calibrated() const {
  return std::count_if(points_.begin(), points_.end(), [](const Point& p) { return p.seconds >= 0.0; }) >= 2;
}

double StepCostModel::seconds(int64_t num_tokens) const {
  // Two consecutive measured points: the first pair whose upper point reaches num_tokens, else
  // the last two (extrapolation).
  const Point* a = nullptr;
  const Point* b = nullptr;
  for (const Point& p : points_) {
    if (p.seconds < 0.0) continue;
    if (a != nullptr && b->tokens >= num_tokens) break;
    a = b;
    b = &p;
  }
  if (b == nullptr) return 0.0;
  if (a == nullptr) return b->seconds * double(num_tokens) / double(b->tokens);  // one point
  if (num_tokens <= a->tokens) return a->seconds;  // below the smallest size: a step has fixed costs
  const double t = double(num_tokens - a->tokens) / double(b->tokens - a->tokens);
  return std::max(0.0, a->seconds + t * (b->seconds - a->seconds));
}

}  // namespace kestrel
