#include "server/prometheus.h"

#include <fmt/format.h>

namespace kestrel::server {
namespace {

void metric_header(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void scalar(std::string& out, const char* name, const char* type, const char* help,
            const std::string& labels, double value) {
  metric_header(out, name, type, help);
  out += fmt::format("{}{{{}}} {}\n", name, labels, value);
}

void histogram(std::string& out, const char* name, const char* help, const std::string& labels,
               const Histogram& h) {
  metric_header(out, name, "histogram", help);
  const auto counts = h.cumulative_counts();
  for (size_t i = 0; i < counts.size(); ++i) {
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, h.upper_bounds()[i], counts[i]);
  }
  out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, h.count());
  out += fmt::format("{}_sum{{{}}} {}\n", name, labels, h.sum());
  out += fmt::format("{}_count{{{}}} {}\n", name, labels, h.count());
}

}  // namespace

std::string render_prometheus(const MetricsSnapshot& m, const std::string& model_name) {
  std::string labels = fmt::format("model_name=\"{}\"", model_name);
  std::string out;
  histogram(out, "kestrel_time_to_first_token_seconds", "Time from arrival to the first generated token.", labels, m.time_to_first_token);
  histogram(out, "kestrel_time_per_output_token_seconds", "Mean time between generated tokens of a request.", labels, m.time_per_output_token);
  histogram(out, "kestrel_e2e_request_latency_seconds", "Time from arrival to the end of a request.", labels, m.e2e_latency);
  histogram(out, "kestrel_request_queue_time_seconds", "Time a request waited before its first scheduling.", labels, m.queue_time);
  scalar(out, "kestrel_num_requests_running", "gauge", "Requests being computed.", labels, double(m.num_running));
  scalar(out, "kestrel_num_requests_waiting", "gauge", "Requests waiting to be scheduled.", labels, double(m.num_waiting));
  scalar(out, "kestrel_kv_cache_blocks_used", "gauge", "KV-cache blocks held by requests.", labels, double(m.kv_blocks_used));
  scalar(out, "kestrel_kv_cache_blocks_total", "gauge", "KV-cache blocks in the pool.", labels, double(m.kv_blocks_total));
  scalar(out, "kestrel_kv_cache_usage_ratio", "gauge", "Fraction of KV-cache blocks in use.", labels,
         m.kv_blocks_total > 0 ? double(m.kv_blocks_used) / double(m.kv_blocks_total) : 0.0);
  metric_header(out, "kestrel_kv_cache_info", "gauge", "The KV cache's element types (labels).");
  out += fmt::format("kestrel_kv_cache_info{{{},k_type=\"{}\",v_type=\"{}\"}} 1\n", labels, m.kv_k_type, m.kv_v_type);
  scalar(out, "kestrel_kv_cache_bytes", "gauge", "Bytes of the whole KV cache.", labels, double(m.kv_bytes));
  scalar(out, "kestrel_kv_cache_bytes_per_token", "gauge", "K and V bytes of one token over every layer.", labels, double(m.kv_bytes_per_token));
  scalar(out, "kestrel_kv_cache_capacity_tokens", "gauge", "Token positions the KV cache holds across all sequences.", labels, double(m.kv_capacity_tokens));
  scalar(out, "kestrel_prefix_cache_blocks", "gauge", "Full blocks registered in the prefix cache.", labels, double(m.kv_blocks_cached));
  scalar(out, "kestrel_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.", labels, double(m.prefix_query_tokens));
  scalar(out, "kestrel_prefix_cache_hits_total", "counter", "Prompt tokens served from the prefix cache.", labels, double(m.prefix_hit_tokens));
  scalar(out, "kestrel_prefix_cache_hit_rate", "gauge", "Prefix-cache hits / queries (tokens).", labels,
         m.prefix_query_tokens > 0 ? double(m.prefix_hit_tokens) / double(m.prefix_query_tokens) : 0.0);
  scalar(out, "kestrel_prompt_tokens_total", "counter", "Prompt tokens admitted.", labels, double(m.prompt_tokens));
  scalar(out, "kestrel_generation_tokens_total", "counter", "Tokens generated.", labels, double(m.generation_tokens));
  scalar(out, "kestrel_num_preemptions_total", "counter", "Requests preempted for lack of KV blocks.", labels, double(m.preemptions));
  metric_header(out, "kestrel_request_success_total", "counter", "Finished requests by finish reason.");
  out += fmt::format("kestrel_request_success_total{{{},finished_reason=\"stop\"}} {}\n", labels, m.requests_stop);
  out += fmt::format("kestrel_request_success_total{{{},finished_reason=\"length\"}} {}\n", labels, m.requests_length);
  out += fmt::format("kestrel_request_success_total{{{},finished_reason=\"abort\"}} {}\n", labels, m.requests_abort);
  scalar(out, "kestrel_request_failure_total", "counter", "Requests that failed in the engine.", labels, double(m.requests_error));
  scalar(out, "kestrel_request_rejected_total", "counter", "Requests refused at submission (too long, queue full).", labels, double(m.requests_rejected));
  if (m.speculative) {
    // vLLM's spec_decode_* names.
    scalar(out, "kestrel_spec_decode_num_drafts_total", "counter", "Verifications of at least one draft token.", labels, double(m.spec_num_drafts));
    scalar(out, "kestrel_spec_decode_num_draft_tokens_total", "counter", "Draft tokens verified.", labels, double(m.spec_num_draft_tokens));
    scalar(out, "kestrel_spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.", labels, double(m.spec_num_accepted_tokens));
    scalar(out, "kestrel_spec_decode_num_catch_up_tokens_total", "counter",
           "Tokens the drafter computed to catch up before drafting (a draft model's prompts).", labels,
           double(m.spec_num_catch_up_tokens));
    metric_header(out, "kestrel_spec_decode_num_accepted_tokens_per_pos_total", "counter",
                  "Draft tokens accepted at each position of their run (0 = first draft).");
    for (size_t i = 0; i < m.spec_accepted_per_position.size(); ++i) {
      out += fmt::format("kestrel_spec_decode_num_accepted_tokens_per_pos_total{{{},position=\"{}\"}} {}\n", labels, i,
                         m.spec_accepted_per_position[i]);
    }
    scalar(out, "kestrel_spec_decode_mean_acceptance_length", "gauge",
           "Tokens per verification (accepted drafts + 1), over the server's life.", labels,
           m.spec_num_drafts > 0 ? 1.0 + double(m.spec_num_accepted_tokens) / double(m.spec_num_drafts) : 0.0);
  }
  return out;
}

}  // namespace kestrel::server
