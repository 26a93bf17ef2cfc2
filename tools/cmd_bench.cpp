// kestrel bench MODEL: speed figures, never pass/fail. Measured on the model runner directly (the
// batch-first runner over the paged KV cache, as the engine drives it, without scheduler or
// sampler):
//   pp   one prompt of --pp tokens in one forward pass (llama-bench's pp512);
//   tg   --tg tokens generated one at a time from an empty cache (llama-bench's tg128);
//   --depth D  pp and tg after D tokens already in the cache (llama-bench -d D: what a long
//        context costs, where the KV cache is a large share of the bytes a step reads);
//   --kv-type T  the K/V cache type (f16 default; core/kv_spec.h);
//   batch B sequences decoding together, one token each per step, --batch-tg steps from an empty
//        cache: total and per-sequence tok/s;
//   bandwidth  a 2 GiB streaming read with the same thread count (best pass, before and after the
//        tests), and the decode roofline it implies: bandwidth / weight bytes read per step
//        (B sequences share one read of the weights, so batch B's roofline is B times that; a
//        MoE step reads its token's experts only, so its roofline counts the active weights).
// Figures are medians over --reps runs, each run doing every test once (so drift affects all
// tests alike). --json adds one machine-readable line at the end (bench/compare_llamacpp.py).
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_checks.h"
#include "commands.h"
#include "core/error.h"
#include "core/large_buffer.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "cmd_bench_spec.h"
#include "kv_options.h"
#include "parallel_options.h"
#include "runner/model_runner.h"

namespace kestrel::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchOptions {
  std::string model;
  int threads = 0;
  int pp = 512;
  int tg = 128;
  std::vector<int> batch = {1, 2, 4, 8, 16, 32};
  int batch_tg = 32;
  int reps = 3;
  int depth = 0;
  KvOptions kv;
  bool json = false;
  bool no_bandwidth = false;
  SpecOptions spec;         // with --draft-model or --spec: the speculative comparison instead
  std::string prompt_file;
  ParallelOptions parallel;
};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Bytes per second of a streaming read of `bytes` by `threads` threads; the best of `reps` passes
// (the roofline is an upper bound, so the best pass is the fair one). The buffer is advised huge
// pages, as weights read into memory are: on the Zen 3 VM such a read was ~4% faster than one of
// 4 KB pages (docs/PERFORMANCE.md, "Weights in memory instead of mapped").
double measure_bandwidth(int threads, int64_t bytes, int reps) {
  const int64_t words = bytes / int64_t(sizeof(uint64_t));
  LargeBuffer memory(size_t(words) * sizeof(uint64_t));
  auto* buffer = reinterpret_cast<uint64_t*>(memory.data());
  ThreadPool pool(threads);
  // Each thread first writes the part it will read, so its pages are faulted in beforehand.
  pool.parallel_for(words, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) buffer[size_t(i)] = uint64_t(i);
  }, 4096);
  std::vector<uint64_t> sums(static_cast<size_t>(threads));
  double best = 0.0;
  for (int rep = 0; rep < reps; ++rep) {
    const auto start = Clock::now();
    pool.run([&](int thread, int num_threads) {
      const int64_t begin = words * thread / num_threads;
      const int64_t end = words * (thread + 1) / num_threads;
      const uint64_t* p = buffer;
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      int64_t i = begin;
      for (; i + 4 <= end; i += 4) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
      }
      for (; i < end; ++i) s0 += p[i];
      sums[size_t(thread)] = s0 + s1 + s2 + s3;  // keeps the loads alive
    });
    best = std::max(best, double(bytes) / seconds_since(start));
  }
  volatile uint64_t sink = 0;
  for (uint64_t s : sums) sink = sink + s;
  return best;
}

// Weight bytes one decode step reads: every matrix that goes through a matmul, plus the norms.
// The token embedding is only gathered (one row per token) unless it doubles as the output.
int64_t weight_bytes_per_token(const Model& model) {
  int64_t bytes = 0;
  for (const auto& t : model.file().tensors()) {
    if (t.name == "token_embd.weight" && !model.weights().tied_output) continue;
    // A token reads only its n_expert_used experts of each MoE stack (model/moe_ffn.h).
    const MoeConfig& moe = model.config().moe;
    if (moe.enabled() && t.name.ends_with("_exps.weight")) {
      bytes += int64_t(t.num_bytes) / moe.n_expert * moe.n_expert_used;
      continue;
    }
    bytes += int64_t(t.num_bytes);
  }
  return bytes;
}

std::string type_summary(const Model& model) {
  std::map<std::string, int> counts;
  for (const auto& t : model.file().tensors()) {
    if (t.dims.size() >= 2) ++counts[std::string(dtype_name(t.type))];
  }
  std::string s;
  for (const auto& [name, count] : counts) s += fmt::format("{}{} x{}", s.empty() ? "" : ", ", name, count);
  return s;
}

int32_t argmax(const float* row, int64_t n) {
  return int32_t(std::max_element(row, row + n) - row);
}

class Bench {
 public:
  Bench(const Model& model, const BenchOptions& o, ParallelContext* parallel) : model_(model), o_(o) {
    const int max_batch = o.batch.empty() ? 1 : *std::max_element(o.batch.begin(), o.batch.end());
    const int64_t seq_tokens = std::max<int64_t>({o.pp, o.tg, o.batch_tg}) + 1;
    blocks_per_seq_ = (seq_tokens + kBlockSize - 1) / kBlockSize;
    // Sequence 0 also holds the depth context (the batched tests start from an empty cache).
    const int64_t first_seq_blocks = (o.depth + seq_tokens + kBlockSize - 1) / kBlockSize;
    num_seqs_ = std::max(1, max_batch);
    RunnerConfig config;
    config.num_threads = o.threads;
    config.kv = model.kv_spec(o.kv.k_type(), o.kv.v_type(), kBlockSize);
    config.kv.rotate = o.kv.rotate;
    config.kv.context_length = o.depth + seq_tokens;  // llama-bench's n_ctx: depth + prompt + generated
    config.parallel = parallel;
    num_groups_ = model.kv_layout().group_windows.size();
    config.group_blocks.assign(num_groups_, first_seq_blocks + blocks_per_seq_ * (num_seqs_ - 1));
    runner_ = std::make_unique<ModelRunner>(model, config);
    BlockId next = 0;
    for (int s = 0; s < num_seqs_; ++s) {
      auto& table = tables_.emplace_back();
      for (int64_t b = 0; b < (s == 0 ? first_seq_blocks : blocks_per_seq_); ++b) table.push_back(next++);
    }
    std::mt19937 rng(1234);
    std::uniform_int_distribution<int32_t> token(0, int32_t(model.config().n_vocab) - 1);
    prompt_.resize(size_t(std::max({o.pp, o.depth, 1})));
    for (auto& id : prompt_) id = token(rng);
  }

  // Fills sequence 0's cache with o.depth tokens of context (chunks of 512), once: the tests then
  // write their tokens after it.
  void fill_depth() {
    for (int64_t pos = 0; pos < o_.depth; pos += 512) {
      SequenceChunk chunk;
      const int64_t n = std::min<int64_t>(512, o_.depth - pos);
      chunk.tokens = std::span<const TokenId>(prompt_.data() + pos, size_t(n));
      chunk.start_position = pos;
      chunk.block_tables.assign(num_groups_, tables_[0]);
      chunk.logits_from = n - 1;
      runner_->execute(std::span<const SequenceChunk>(&chunk, 1));
    }
  }
  const ModelRunner& runner() const { return *runner_; }

  // Seconds for one prompt of o.pp tokens.
  double prompt() {
    SequenceChunk chunk;
    chunk.tokens = std::span<const TokenId>(prompt_.data(), size_t(o_.pp));
    chunk.start_position = o_.depth;
    chunk.block_tables.assign(num_groups_, tables_[0]);
    chunk.logits_from = o_.pp - 1;
    const auto start = Clock::now();
    runner_->execute(std::span<const SequenceChunk>(&chunk, 1));
    return seconds_since(start);
  }

  // Seconds for `steps` decode steps of `num_seqs` sequences, each from an empty cache (sequence
  // 0 alone: from `depth`).
  double decode(int num_seqs, int steps, int64_t depth = 0) {
    const int64_t n_vocab = model_.config().n_vocab;
    std::vector<TokenId> tokens(static_cast<size_t>(num_seqs));
    for (int s = 0; s < num_seqs; ++s) tokens[size_t(s)] = prompt_[size_t(s) % prompt_.size()];
    std::vector<SequenceChunk> chunks(static_cast<size_t>(num_seqs));
    const auto start = Clock::now();
    for (int step = 0; step < steps; ++step) {
      for (int s = 0; s < num_seqs; ++s) {
        SequenceChunk& c = chunks[size_t(s)];
        c.tokens = std::span<const TokenId>(&tokens[size_t(s)], 1);
        c.start_position = depth + step;
        c.block_tables.assign(num_groups_, tables_[size_t(s)]);
        c.logits_from = 0;
      }
      const std::span<float> logits = runner_->execute(chunks);
      for (int s = 0; s < num_seqs; ++s) tokens[size_t(s)] = argmax(logits.data() + s * n_vocab, n_vocab);
    }
    return seconds_since(start);
  }

 private:
  static constexpr int kBlockSize = 16;
  const Model& model_;
  const BenchOptions& o_;
  std::unique_ptr<ModelRunner> runner_;
  size_t num_groups_ = 1;
  int64_t blocks_per_seq_ = 0;
  int num_seqs_ = 0;
  std::vector<std::vector<BlockId>> tables_;
  std::vector<TokenId> prompt_;
};

std::string format_rate(double v) { return v > 0 ? fmt::format("{:.2f}", v) : "-"; }
std::string format_percent(double achieved, double roofline) {
  return roofline > 0 ? fmt::format("{:.0f}%", 100.0 * achieved / roofline) : "-";
}

void bench_root(BenchOptions o, const Model& model, ParallelContext& parallel) {
  if (o.threads <= 0) o.threads = default_thread_count();
  std::erase(o.batch, 0);  // --batch 0: no batched test
  const ModelConfig& c = model.config();
  const int64_t bytes_per_token = weight_bytes_per_token(model);

  // Measured before and after the tests; the higher figure counts (other work on the machine
  // only ever lowers it).
  const int64_t bandwidth_bytes = int64_t(2) << 30;
  double bandwidth = o.no_bandwidth ? 0.0 : measure_bandwidth(o.threads, bandwidth_bytes, 3);

  Bench bench(model, o, parallel.distributed() ? &parallel : nullptr);
  bench.fill_depth();
  bench.decode(1, 2, o.depth);  // warm-up: threads, caches, scratch
  std::vector<double> pp_rates, tg_rates;
  std::vector<std::vector<double>> batch_rates(o.batch.size());
  for (int rep = 0; rep < o.reps; ++rep) {
    if (o.pp > 0) pp_rates.push_back(double(o.pp) / bench.prompt());
    if (o.tg > 0) tg_rates.push_back(double(o.tg) / bench.decode(1, o.tg, o.depth));
    for (size_t i = 0; i < o.batch.size(); ++i) {
      const int b = o.batch[i];
      batch_rates[i].push_back(double(b) * o.batch_tg / bench.decode(b, o.batch_tg));
    }
  }

  if (!o.no_bandwidth) {
    bandwidth = std::max(bandwidth, measure_bandwidth(o.threads, bandwidth_bytes, 3));
  }
  const double roofline = bandwidth > 0 ? bandwidth / double(bytes_per_token) : 0.0;
  const double pp = median(pp_rates), tg = median(tg_rates);
  fmt::print("model: {} ({}; {:.3f}B parameters; {}; {:.3f} GiB of weights read per token, {}{})\n",
             o.model, c.name, double(model.parameter_count()) / 1e9, type_summary(model),
             double(bytes_per_token) / double(1 << 30), model.weights_in_memory() ? "in memory" : "mapped",
             parallel.distributed() ? fmt::format(": rank 0's shard, one of {} ranks", parallel.world_size()) : "");
  double load[1] = {0.0};
  const bool have_load = getloadavg(load, 1) == 1;
  const KvCacheSpec& kv = bench.runner().kv_spec();
  fmt::print("KV cache: {} ({} bytes per token over {} layers), depth {}\n", kv.describe(),
             kv.token_bytes() * c.n_layer, c.n_layer, o.depth);
  fmt::print("threads: {}, reps: {} (medians){}\n", o.threads, o.reps,
             have_load ? fmt::format(", load average {:.1f} on {} cores (other work skews the figures)",
                                     load[0], default_thread_count())
                       : "");
  if (bandwidth > 0) {
    fmt::print("memory bandwidth: {:.1f} GB/s (2 GiB streaming read) -> decode roofline {:.2f} tok/s per sequence\n",
               bandwidth / 1e9, roofline);
  }
  fmt::print("\n| test | tok/s | tok/s per sequence | roofline tok/s | % of roofline |\n");
  fmt::print("|---|---:|---:|---:|---:|\n");
  const std::string at_depth = o.depth > 0 ? fmt::format(" @ d{}", o.depth) : "";
  if (o.pp > 0) fmt::print("| pp{}{} | {} | | - | - |\n", o.pp, at_depth, format_rate(pp));
  if (o.tg > 0) {
    fmt::print("| tg{}{} | {} | {} | {} | {} |\n", o.tg, at_depth, format_rate(tg), format_rate(tg),
               format_rate(roofline), format_percent(tg, roofline));
  }
  nlohmann::json batches = nlohmann::json::array();
  for (size_t i = 0; i < o.batch.size(); ++i) {
    const int b = o.batch[i];
    const double total = median(batch_rates[i]);
    fmt::print("| batch {} x tg{} | {} | {} | {} | {} |\n", b, o.batch_tg, format_rate(total),
               format_rate(total / b), format_rate(roofline * b), format_percent(total, roofline * b));
    batches.push_back({{"sequences", b}, {"steps", o.batch_tg}, {"tok_s", total},
                       {"tok_s_per_seq", total / b}, {"runs", batch_rates[i]}});
  }
  fmt::print("(pp is compute-bound: no bandwidth roofline. KV-cache reads are left out of the "
             "roofline{}.)\n", o.depth > 0 ? "" : ": small at these lengths");
  if (o.json) {
    const nlohmann::json out = {
        {"model", o.model},
        {"name", c.name},
        {"parameters", model.parameter_count()},
        {"types", type_summary(model)},
        {"threads", o.threads},
        {"load_average", have_load ? load[0] : -1.0},
        {"reps", o.reps},
        {"kv", kv.describe()},
        {"depth", o.depth},
        {"weight_bytes_per_token", bytes_per_token},
        {"weights_in_memory", model.weights_in_memory()},
        {"bandwidth_bytes_s", bandwidth},
        {"roofline_tok_s", roofline},
        {"pp", {{"tokens", o.pp}, {"tok_s", pp}, {"runs", pp_rates}}},
        {"tg", {{"tokens", o.tg}, {"tok_s", tg}, {"runs", tg_rates}}},
        {"batch", batches},
    };
    fmt::print("{}\n", out.dump());
  }
}

}  // namespace

void register_bench(CLI::App& app) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "measure prompt, generation and batched decode speed");
  cmd->add_option("model", options->model, "GGUF model file")->required();
  cmd->add_option("-t,--threads", options->threads, "threads (default: the available CPUs)")->check(int_range(1, 1024));
  cmd->add_option("--pp", options->pp, "prompt tokens (0: skip)")->check(int_range(0, 1 << 16));
  cmd->add_option("--tg", options->tg, "generated tokens (0: skip)")->check(int_range(0, 1 << 16));
  cmd->add_option("--batch", options->batch, "batched decode: numbers of sequences (0: skip)")
      ->delimiter(',')->check(int_range(0, 1024));
  cmd->add_option("--batch-tg", options->batch_tg, "decode steps of each batched test")->check(int_range(1, 1 << 16));
  cmd->add_option("--reps", options->reps, "repetitions (figures are medians)")->check(int_range(1, 1000));
  cmd->add_option("--depth", options->depth, "tokens already in the cache before pp and tg (llama-bench -d)")
      ->check(int_range(0, 1 << 22));
  add_kv_options(*cmd, options->kv, /*with_sinks=*/false);
  cmd->add_flag("--json", options->json, "end with one JSON line of all figures");
  cmd->add_flag("--no-bandwidth", options->no_bandwidth, "skip the memory bandwidth measurement");
  add_spec_options(*cmd, options->spec);
  add_parallel_options(*cmd, options->parallel, "--pipeline-parallel");
  cmd->add_option("--prompt-file", options->prompt_file,
                  "with --draft-model/--spec: prompts, one per blank-line-separated paragraph (default: code tasks)")
      ->check(existing_file());
  cmd->callback([options] {
    if (!options->spec.draft_model.empty() || (!options->spec.method.empty() && options->spec.method != "none")) {
      if (options->tg < 1) fail("--tg 0 skips generation, but the speculative comparison is all generation");
      SpecBenchOptions s{options->model, options->threads, options->tg, options->reps, options->prompt_file, options->spec};
      bench_speculative(s);
      return;
    }
    GroupMember member = join_group(options->parallel, options->model);
    if (!member.is_root()) return run_worker_rank(member, options->threads, options->kv);
    run_root_rank(member, [&] { bench_root(*options, *member.model, *member.parallel); });
  });
}

}  // namespace kestrel::cli
