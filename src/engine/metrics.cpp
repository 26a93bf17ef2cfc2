#include "engine/metrics.h"

#include <algorithm>

namespace kestrel {

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), bucket_counts_(upper_bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const size_t bucket = size_t(std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) -
                               upper_bounds_.begin());
  ++bucket_counts_[bucket];
  sum_ += value;
  ++count_;
}

std::vector<uint64_t> Histogram::cumulative_counts() const {
  std::vector<uint64_t> out(upper_bounds_.size());
  uint64_t running = 0;
  for (size_t i = 0; i < upper_bounds_.size(); ++i) {
    running += bucket_counts_[i];
    out[i] = running;
  }
  return out;
}

EngineMetrics::EngineMetrics() {
  // Seconds; the same bucket edges vLLM uses for its latency histograms, give or take.
  const std::vector<double> latency = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                       0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
  const std::vector<double> per_token = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
                                         0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5};
  data_.time_to_first_token = Histogram(latency);
  data_.time_per_output_token = Histogram(per_token);
  data_.e2e_latency = Histogram(latency);
  data_.queue_time = Histogram(latency);
}

MetricsSnapshot EngineMetrics::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return data_;
}

}  // namespace kestrel
