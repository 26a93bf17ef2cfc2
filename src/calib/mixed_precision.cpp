#include "calib/mixed_precision.h"

#include <algorithm>
#include <optional>
#include <queue>

#include "core/error.h"

namespace kestrel::calib {
namespace {

// The options on the lower convex hull of (bytes, cost), by increasing bytes and strictly
// decreasing cost: an option that costs more bytes without saving cost, or whose saving per byte is
// beaten by a larger option's, is never worth taking.
std::vector<TypeOption> lower_hull(std::vector<TypeOption> options) {
  std::sort(options.begin(), options.end(), [](const TypeOption& a, const TypeOption& b) {
    return a.bytes != b.bytes ? a.bytes < b.bytes : a.cost < b.cost;
  });
  std::vector<TypeOption> hull;
  for (const TypeOption& o : options) {
    if (!hull.empty() && o.cost >= hull.back().cost) continue;  // dominated (or the same size)
    // Pop the last point while it lies on or above the segment from the one before it to o.
    while (hull.size() >= 2) {
      const TypeOption& a = hull[hull.size() - 2];
      const TypeOption& b = hull.back();
      const double cross = (double(b.bytes) - double(a.bytes)) * (o.cost - a.cost) -
                           (b.cost - a.cost) * (double(o.bytes) - double(a.bytes));
      if (cross > 0) break;  // b is below the segment a-o: keep it
      hull.pop_back();
    }
    hull.push_back(o);
  }
  return hull;
}

}  // namespace

double scaled_cost(double probe_kld, double probe_error, double error) {
  return probe_error > 0 ? probe_kld * error / probe_error : 0.0;
}

MixedPrecisionPlan plan_mixed_precision(const std::vector<TensorOptions>& tensors, int64_t budget_bytes) {
  std::vector<std::vector<TypeOption>> hulls;
  std::vector<size_t> at(tensors.size(), 0);
  MixedPrecisionPlan plan;
  for (const TensorOptions& t : tensors) {
    if (t.options.empty()) fail("internal: mixed precision: tensor '{}' has no candidate type", t.name);
    hulls.push_back(lower_hull(t.options));
    plan.bytes += hulls.back().front().bytes;
    plan.cost += hulls.back().front().cost;
  }
  if (plan.bytes > budget_bytes) {
    fail("the target ({:.1f} MiB of matrices) is below the smallest this model can take with the candidate "
         "types ({:.1f} MiB, every matrix in its smallest type)",
         double(budget_bytes) / (1 << 20), double(plan.bytes) / (1 << 20));
  }
  // Upgrades by cost saved per byte; ties by tensor order so the plan is deterministic.
  struct Upgrade {
    double gain;
    size_t tensor;
    bool operator<(const Upgrade& o) const { return gain != o.gain ? gain < o.gain : tensor > o.tensor; }
  };
  auto next_upgrade = [&](size_t t) -> std::optional<Upgrade> {
    const std::vector<TypeOption>& hull = hulls[t];
    if (at[t] + 1 >= hull.size()) return std::nullopt;
    const TypeOption& now = hull[at[t]];
    const TypeOption& next = hull[at[t] + 1];
    return Upgrade{(now.cost - next.cost) / double(next.bytes - now.bytes), t};
  };
  std::priority_queue<Upgrade> queue;
  for (size_t t = 0; t < tensors.size(); ++t) {
    if (auto u = next_upgrade(t)) queue.push(*u);
  }
  while (!queue.empty()) {
    const Upgrade u = queue.top();
    queue.pop();
    const TypeOption& now = hulls[u.tensor][at[u.tensor]];
    const TypeOption& next = hulls[u.tensor][at[u.tensor] + 1];
    if (plan.bytes + (next.bytes - now.bytes) > budget_bytes) continue;  // this tensor stays
    plan.bytes += next.bytes - now.bytes;
    plan.cost += next.cost - now.cost;
    ++at[u.tensor];
    if (auto v = next_upgrade(u.tensor)) queue.push(*v);
  }
  // The budget the hull steps left: spend it on the single change (any option, on the hull or not)
  // that saves the most, until none fits.
  std::vector<TypeOption> now(tensors.size());
  for (size_t t = 0; t < tensors.size(); ++t) now[t] = hulls[t][at[t]];
  while (true) {
    double best_saving = 0;
    size_t best_tensor = 0;
    const TypeOption* best = nullptr;
    for (size_t t = 0; t < tensors.size(); ++t) {
      for (const TypeOption& o : tensors[t].options) {
        const double saving = now[t].cost - o.cost;
        if (saving > best_saving && plan.bytes + (o.bytes - now[t].bytes) <= budget_bytes) {
          best_saving = saving, best_tensor = t, best = &o;
        }
      }
    }
    if (best == nullptr) break;
    plan.bytes += best->bytes - now[best_tensor].bytes;
    plan.cost -= best_saving;
    now[best_tensor] = *best;
  }
  for (const TypeOption& o : now) plan.types.push_back(o.type);
  return plan;
}

}  // namespace kestrel::calib
