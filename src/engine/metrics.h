// Serving metrics collected by the engine thread and read by the HTTP server (for /metrics).
// All access goes through one mutex: updates happen once per engine step, reads once per scrape.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace kestrel {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  const std::vector<double>& upper_bounds() const { return upper_bounds_; }
  // counts()[i] = observations <= upper_bounds()[i] (cumulative, as Prometheus reports them).
  std::vector<uint64_t> cumulative_counts() const;
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> upper_bounds_;
  std::vector<uint64_t> bucket_counts_;  // per bucket, not cumulative; last = +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

struct MetricsSnapshot {
  Histogram time_to_first_token{{}};
  Histogram time_per_output_token{{}};
  Histogram e2e_latency{{}};
  Histogram queue_time{{}};
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_cached = 0;
  // The KV cache as sized at start (engine.h's KvCapacity).
  std::string kv_k_type, kv_v_type;
  int64_t kv_bytes = 0;
  int64_t kv_bytes_per_token = 0;
  int64_t kv_capacity_tokens = 0;
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  int64_t preemptions = 0;
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t requests_stop = 0;
  int64_t requests_length = 0;
  int64_t requests_abort = 0;
  int64_t requests_error = 0;
  int64_t requests_rejected = 0;
  // Speculative decoding (engine/speculator.h's SpecStats), when the engine speculates.
  bool speculative = false;
  int64_t spec_num_drafts = 0;
  int64_t spec_num_draft_tokens = 0;
  int64_t spec_num_accepted_tokens = 0;
  int64_t spec_num_catch_up_tokens = 0;
  std::vector<int64_t> spec_accepted_per_position;
};

class EngineMetrics {
 public:
  EngineMetrics();
  MetricsSnapshot snapshot() const;

  // All updates take the lock; the engine thread batches them per step.
  template <typename F>
  void update(F&& f) {
    std::lock_guard<std::mutex> lock(mutex_);
    f(data_);
  }

 private:
  mutable std::mutex mutex_;
  MetricsSnapshot data_;
};

}  // namespace kestrel
