// Paged attention for one decode token over a long context, per KV type and kernel ISA: figures,
// never pass/fail. The shape is Llama-3.2-1B's (32 query heads, 8 KV heads of 64) at a depth of
// --depth positions (default 16384), and each call reads one of 16 layers' caches in turn, so the
// K/V come from DRAM as in a real decode step (16 layers x 16384 x 2 KiB = 512 MiB in f16).
// Reported: ms per layer, the K/V bytes read per second, and ns per (key, query head).
//
//   build/release/bench/attention_bench --benchmark_filter='f16/avx512/threads:2'
//   ATTENTION_DEPTH=4096 build/release/bench/attention_bench
// Names: decode/<kv type>/<isa>/threads:<t> (the sequence's blocks in order, as a fresh pool hands
// them out), decode_shuffled/... (blocks anywhere, as after a server's churn).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "core/kv_spec.h"
#include "core/large_buffer.h"
#include "quant/format.h"

namespace kestrel {
namespace {

constexpr int kLayers = 16, kHeads = 32, kKvHeads = 8, kHeadDim = 64;
const int kBlock = std::getenv("ATTENTION_BLOCK") ? std::atoi(std::getenv("ATTENTION_BLOCK")) : 16;

int64_t depth() {
  const char* env = std::getenv("ATTENTION_DEPTH");
  return env != nullptr ? std::atoll(env) : 16384;
}

std::unique_ptr<Backend> backend_for(cpu::Isa isa, int threads) {
  setenv("KESTREL_ISA", std::string(cpu::isa_name(isa)).c_str(), 1);
  auto backend = make_cpu_backend(threads);
  unsetenv("KESTREL_ISA");
  return backend;
}

void run_decode(benchmark::State& state, DType type, cpu::Isa isa, int threads, bool shuffled) {
  const int64_t positions = depth();
  const int64_t blocks = (positions + kBlock) / kBlock;
  KvCacheSpec spec;
  spec.k_type = spec.v_type = type;
  spec.n_kv_head = kKvHeads;
  spec.head_dim = kHeadDim;
  spec.block_size = kBlock;
  auto backend = backend_for(isa, threads);
  // Every layer's cache written through kv_write with random K/V (the block order shuffled, as a
  // pool hands blocks out).
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) table[size_t(b)] = int32_t(b);
  // Blocks in order, as a fresh pool hands them to one long sequence, or shuffled, as after churn.
  if (shuffled) std::shuffle(table.begin(), table.end(), rng);
  std::vector<LargeBuffer> k_mem(kLayers), v_mem(kLayers);
  std::vector<KvLayerView> layers;
  const int64_t chunk = 256;
  std::vector<float> k(size_t(chunk * kKvHeads * kHeadDim)), v(k.size());
  std::vector<int64_t> slots(static_cast<size_t>(chunk));
  for (int l = 0; l < kLayers; ++l) {
    k_mem[size_t(l)] = LargeBuffer(size_t(blocks * kBlock * kKvHeads * spec.k_row_bytes()));
    v_mem[size_t(l)] = LargeBuffer(size_t(blocks * kBlock * kKvHeads * spec.v_row_bytes()));
    KvLayerView view;
    view.k_type = view.v_type = type;
    view.k = k_mem[size_t(l)].data();
    view.v = v_mem[size_t(l)].data();
    view.num_slots = blocks * kBlock;
    view.n_kv_head = kKvHeads;
    view.k_row_bytes = spec.k_row_bytes();
    view.v_row_bytes = spec.v_row_bytes();
    for (int64_t p = 0; p < positions + 1; p += chunk) {
      const int64_t n = std::min(chunk, positions + 1 - p);
      for (float& x : k) x = dist(rng);
      for (float& x : v) x = dist(rng);
      for (int64_t i = 0; i < n; ++i) slots[size_t(i)] = int64_t(table[size_t((p + i) / kBlock)]) * kBlock + (p + i) % kBlock;
      backend->kv_write(view, k.data(), v.data(), slots.data(), n, kKvHeads, kHeadDim);
    }
    layers.push_back(view);
  }
  std::vector<float> q(size_t(kHeads * kHeadDim)), out(q.size());
  for (float& x : q) x = dist(rng);
  const int32_t position = int32_t(positions), seq = 0;
  PagedAttentionArgs args;
  args.num_tokens = 1;
  args.positions = &position;
  args.token_seq = &seq;
  args.block_tables = table.data();
  args.max_blocks_per_seq = int(blocks);
  args.block_size = kBlock;
  args.n_head = kHeads;
  args.n_kv_head = kKvHeads;
  args.head_dim = kHeadDim;
  args.scale = 0.125f;
  int layer = 0;
  double best = 1e30;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    backend->paged_attention(args, q.data(), layers[size_t(layer)], out.data());
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    benchmark::DoNotOptimize(out.data());
    layer = (layer + 1) % kLayers;
  }
  const double bytes = double(positions + 1) * double(spec.token_bytes());
  state.SetBytesProcessed(int64_t(double(state.iterations()) * bytes));
  state.counters["best_GB/s"] = bytes / best * 1e-9;
  state.counters["best_ms"] = best * 1e3;
  state.counters["ns/key-head"] = best * 1e9 / (double(positions + 1) * kHeads) * threads;
}

void register_all() {
  for (DType type : kv_types()) {
    for (cpu::Isa isa : {cpu::Isa::Scalar, cpu::Isa::Avx2, cpu::Isa::Avx512}) {
      if (cpu::kernels_for(isa) == nullptr) continue;
      for (int threads : {1, 2}) {
        for (bool shuffled : {false, true}) {
          const std::string name = std::string(shuffled ? "decode_shuffled/" : "decode/") +
                                   std::string(kv_type_name(type)) + "/" + std::string(cpu::isa_name(isa)) +
                                   "/threads:" + std::to_string(threads);
          benchmark::RegisterBenchmark(name.c_str(),
                                       [=](benchmark::State& s) { run_decode(s, type, isa, threads, shuffled); })
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond);
        }
      }
    }
  }
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  kestrel::register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
