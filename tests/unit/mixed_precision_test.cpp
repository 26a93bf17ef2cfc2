// The mixed-precision planner (calib/mixed_precision.h): against an exhaustive search on small
// random instances, its choices stay within the budget and cost no more than the optimum plus one
// step of the knapsack's greedy slack (and exactly the optimum when its upgrades fill the budget);
// a more sensitive tensor gets the bits first; dominated and non-convex options are never chosen;
// a budget below the smallest plan is a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "calib/mixed_precision.h"
#include "core/error.h"

namespace kestrel::calib {
namespace {

const DType kTypes[] = {DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};

// Convex instances: cost falls as sensitivity * 2^(-2 bits), as a quantizer's squared error does.
std::vector<TensorOptions> random_instance(std::mt19937& rng, int tensors) {
  std::uniform_real_distribution<double> sensitivity(0.01, 5.0);
  std::uniform_int_distribution<int> size(1, 8);
  std::vector<TensorOptions> out;
  for (int t = 0; t < tensors; ++t) {
    TensorOptions o{"t" + std::to_string(t), {}};
    const double s = sensitivity(rng);
    const int64_t elements = 256 * size(rng);
    for (int k = 0; k < 4; ++k) {
      const int bits = 3 + k;
      o.options.push_back({kTypes[k], elements * bits / 8, s * std::pow(2.0, -2.0 * bits)});
    }
    out.push_back(std::move(o));
  }
  return out;
}

// The cheapest total cost within the budget, over every assignment.
double exhaustive_optimum(const std::vector<TensorOptions>& tensors, int64_t budget) {
  double best = std::numeric_limits<double>::infinity();
  std::vector<size_t> pick(tensors.size(), 0);
  while (true) {
    int64_t bytes = 0;
    double cost = 0;
    for (size_t t = 0; t < tensors.size(); ++t) bytes += tensors[t].options[pick[t]].bytes, cost += tensors[t].options[pick[t]].cost;
    if (bytes <= budget) best = std::min(best, cost);
    size_t t = 0;
    while (t < tensors.size() && ++pick[t] == tensors[t].options.size()) pick[t++] = 0;
    if (t == tensors.size()) return best;
  }
}

TEST(MixedPrecision, WithinBudgetAndNearTheExhaustiveOptimum) {
  std::mt19937 rng(7);
  int exact = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const auto tensors = random_instance(rng, 6);
    int64_t smallest = 0, largest = 0;
    double max_step = 0;  // the largest cost a single upgrade saves
    for (const auto& t : tensors) {
      smallest += t.options.front().bytes, largest += t.options.back().bytes;
      for (size_t k = 0; k + 1 < t.options.size(); ++k) max_step = std::max(max_step, t.options[k].cost - t.options[k + 1].cost);
    }
    const int64_t budget = smallest + (largest - smallest) * (trial % 10) / 10;
    const MixedPrecisionPlan plan = plan_mixed_precision(tensors, budget);
    ASSERT_EQ(plan.types.size(), tensors.size());
    int64_t bytes = 0;
    double cost = 0;
    for (size_t t = 0; t < tensors.size(); ++t) {
      const auto& o = tensors[t].options;
      const auto it = std::find_if(o.begin(), o.end(), [&](const TypeOption& x) { return x.type == plan.types[t]; });
      ASSERT_NE(it, o.end());
      bytes += it->bytes, cost += it->cost;
    }
    EXPECT_EQ(bytes, plan.bytes);
    EXPECT_NEAR(cost, plan.cost, 1e-12 * cost);
    EXPECT_LE(plan.bytes, budget);
    const double optimum = exhaustive_optimum(tensors, budget);
    EXPECT_GE(plan.cost, optimum * (1 - 1e-12));
    EXPECT_LE(plan.cost, optimum + max_step) << "trial " << trial;
    exact += plan.cost <= optimum * (1 + 1e-9);
  }
  EXPECT_GE(exact, 30) << "the greedy order is the optimum on most budgets of convex instances";
  // With room for everything, every tensor takes its best option.
  const auto tensors = random_instance(rng, 5);
  const MixedPrecisionPlan all = plan_mixed_precision(tensors, std::numeric_limits<int64_t>::max() / 2);
  for (DType t : all.types) EXPECT_EQ(t, DType::Q6_K);
}

TEST(MixedPrecision, TheSensitiveTensorGetsTheBits) {
  // Two tensors of the same size; room for one upgrade from Q3_K to Q4_K.
  const std::vector<TensorOptions> tensors = {
      {"calm", {{DType::Q3_K, 300, 1.0}, {DType::Q4_K, 400, 0.3}}},
      {"sensitive", {{DType::Q3_K, 300, 10.0}, {DType::Q4_K, 400, 3.0}}},
  };
  const MixedPrecisionPlan plan = plan_mixed_precision(tensors, 700);
  EXPECT_EQ(plan.types[0], DType::Q3_K);
  EXPECT_EQ(plan.types[1], DType::Q4_K);
  EXPECT_EQ(plan.bytes, 700);
  EXPECT_DOUBLE_EQ(plan.cost, 4.0);
}

TEST(MixedPrecision, DominatedAndNonConvexOptionsAreSkipped) {
  // Q5_K costs more bytes than Q4_K and saves nothing (dominated); Q4_K saves less per byte than the
  // step straight to Q6_K (off the hull). With room for Q6_K the plan jumps there; with room for
  // Q4_K only, the leftover pass takes it.
  const std::vector<TensorOptions> tensors = {
      {"t", {{DType::Q3_K, 100, 10.0}, {DType::Q4_K, 150, 9.0}, {DType::Q5_K, 180, 9.5}, {DType::Q6_K, 200, 1.0}}},
  };
  EXPECT_EQ(plan_mixed_precision(tensors, 200).types[0], DType::Q6_K);
  EXPECT_EQ(plan_mixed_precision(tensors, 190).types[0], DType::Q4_K);
  EXPECT_EQ(plan_mixed_precision(tensors, 149).types[0], DType::Q3_K);
  EXPECT_DOUBLE_EQ(scaled_cost(0.02, 4.0, 1.0), 0.005);
  EXPECT_EQ(scaled_cost(0.02, 0.0, 1.0), 0.0);
}

TEST(MixedPrecision, BudgetBelowTheSmallestPlanIsAClearError) {
  const std::vector<TensorOptions> tensors = {
      {"a", {{DType::Q3_K, 1 << 20, 1.0}, {DType::Q8_0, 3 << 20, 0.1}}},
      {"b", {{DType::Q3_K, 1 << 20, 1.0}}},
  };
  try {
    plan_mixed_precision(tensors, (2 << 20) - 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("below the smallest this model can take with the candidate types (2.0 MiB"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kestrel::calib
