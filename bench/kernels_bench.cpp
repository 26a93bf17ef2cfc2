// CPU matmul kernels: figures, never pass/fail. Weight streaming (GB/s of weight bytes) for one
// token, and GFLOP/s for prefill batches, on a matrix the size of Llama-3.2-1B's FFN
// (8192 x 2048), per weight format, kernel ISA and thread count; next to a plain 2 GiB streaming
// read, which is what one-token decoding can at best approach.
//
// One-token runs rotate through copies of the matrix totalling >= 1 GiB, so every call reads its
// weights from DRAM as a real forward pass does (a single 8192 x 2048 matrix would sit in L3).
//
//   build/simdrel/bench/kernels_bench --benchmark_filter='decode/'       # n = 1, weights from DRAM
//   build/simdrel/bench/kernels_bench --benchmark_filter='decodehot'     # n = 1, weights in L3
//   build/simdrel/bench/kernels_bench --benchmark_filter='prefill'       # n = 64, 512
//   build/simdrel/bench/kernels_bench --benchmark_filter='stream'
// Names: <kind>/<format>/<isa>/n:<tokens>/threads:<t>.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "quant/format.h"

namespace kestrel {
namespace {

constexpr int64_t kRows = 8192;
constexpr int64_t kCols = 2048;
constexpr int64_t kStreamBytes = int64_t(1) << 30;  // weights touched per rotation, >> L3

// kRows x kCols in `type`: 256 distinct random rows, repeated (quantizing k-quants is slow).
std::vector<uint8_t> make_matrix(DType type) {
  const quant::WeightFormat& format = quant::require_format(type);
  const int64_t row_bytes = quant::row_bytes(format, kCols);
  std::vector<uint8_t> bytes(size_t(kRows * row_bytes));
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<float> src(static_cast<size_t>(kCols));
  constexpr int64_t kDistinct = 256;
  for (int64_t r = 0; r < kDistinct; ++r) {
    uint8_t* row = bytes.data() + r * row_bytes;
    for (float& v : src) v = dist(rng);
    format.quantize_row(src.data(), row, kCols);
  }
  for (int64_t r = kDistinct; r < kRows; ++r) {
    std::memcpy(bytes.data() + r * row_bytes, bytes.data() + (r % kDistinct) * row_bytes, size_t(row_bytes));
  }
  return bytes;
}

double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

std::unique_ptr<Backend> backend_for(cpu::Isa isa, int threads) {
  setenv("KESTREL_ISA", std::string(cpu::isa_name(isa)).c_str(), 1);
  auto backend = make_cpu_backend(threads);
  unsetenv("KESTREL_ISA");
  return backend;
}

void run_matmul(benchmark::State& state, DType type, cpu::Isa isa, int64_t n, int threads, bool cold) {
  const std::vector<uint8_t> matrix = make_matrix(type);
  const int64_t matrix_bytes = int64_t(matrix.size());
  // Decode rotates through cold copies; prefill reuses one (it is compute-bound).
  const int64_t copies = cold ? (kStreamBytes + matrix_bytes - 1) / matrix_bytes : 1;
  std::vector<uint8_t> weights(size_t(copies * matrix_bytes));
  for (int64_t c = 0; c < copies; ++c) {
    std::memcpy(weights.data() + c * matrix_bytes, matrix.data(), size_t(matrix_bytes));
  }
  auto backend = backend_for(isa, threads);
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(size_t(n * kCols));
  for (float& v : x) v = dist(rng);
  std::vector<float> y(size_t(n * kRows));
  int64_t copy = 0;
  double best = 1e30, best_cpu = 1e30;
  for (auto _ : state) {
    const WeightView view{type, kRows, kCols, weights.data() + copy * matrix_bytes};
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = thread_seconds();
    backend->matmul(view, x.data(), n, y.data());
    best_cpu = std::min(best_cpu, thread_seconds() - cpu_start);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    benchmark::DoNotOptimize(y.data());
    copy = (copy + 1) % copies;
  }
  // Mean rates, and rates of the fastest call: on a shared machine the fastest call is the one
  // that ran without being preempted.
  state.SetBytesProcessed(state.iterations() * matrix_bytes);
  const double flop = 2.0 * double(kRows) * double(kCols) * double(n);
  state.counters["GFLOP/s"] =
      benchmark::Counter(double(state.iterations()) * flop * 1e-9, benchmark::Counter::kIsRate);
  state.counters["best_GB/s"] = double(matrix_bytes) / best * 1e-9;
  state.counters["best_GFLOP/s"] = flop / best * 1e-9;
  // One thread: the calling thread's own CPU time leaves out time other processes took from it.
  if (threads == 1) {
    state.counters["cpu_GB/s"] = double(matrix_bytes) / best_cpu * 1e-9;
    state.counters["cpu_GFLOP/s"] = flop / best_cpu * 1e-9;
  }
}

// Sums a buffer with 256-bit loads, split across the pool's threads: the read bandwidth the
// decode kernels compete against.
void run_stream(benchmark::State& state, int threads) {
  constexpr int64_t kBytes = int64_t(2) << 30;
  std::vector<uint8_t> buffer(static_cast<size_t>(kBytes), 1);
  ThreadPool pool(threads);
  double best = 1e30;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<int64_t> sums(size_t(threads), 0);
    pool.run([&](int index, int count) {
      const int64_t chunk = kBytes / count;
      const auto* p = reinterpret_cast<const __m256i*>(buffer.data() + index * chunk);
      __m256i acc0 = _mm256_setzero_si256(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
      for (int64_t i = 0; i < chunk / 32; i += 4) {
        acc0 = _mm256_add_epi64(acc0, _mm256_load_si256(p + i));
        acc1 = _mm256_add_epi64(acc1, _mm256_load_si256(p + i + 1));
        acc2 = _mm256_add_epi64(acc2, _mm256_load_si256(p + i + 2));
        acc3 = _mm256_add_epi64(acc3, _mm256_load_si256(p + i + 3));
      }
      const __m256i acc = _mm256_add_epi64(_mm256_add_epi64(acc0, acc1), _mm256_add_epi64(acc2, acc3));
      sums[size_t(index)] = _mm256_extract_epi64(acc, 0) + _mm256_extract_epi64(acc, 3);
    });
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    benchmark::DoNotOptimize(sums.data());
  }
  state.SetBytesProcessed(state.iterations() * kBytes);
  state.counters["best_GB/s"] = double(kBytes) / best * 1e-9;
}

void register_all() {
  for (int threads : {1, 2}) {
    benchmark::RegisterBenchmark(("stream/threads:" + std::to_string(threads)).c_str(),
                                 [threads](benchmark::State& s) { run_stream(s, threads); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  const DType types[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q3_K, DType::Q4_K,
                         DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::NF4, DType::IQ4_XS, DType::IQ3_XXS, DType::IQ3_S, DType::IQ3_S_L4, DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S, DType::IQ1_S, DType::IQ1_M, DType::TQ1_0, DType::TQ2_0,
                         DType::MXFP4, DType::INT8_PC, DType::INT4_SYM_G128, DType::INT4_ASYM_G128, DType::FP8_E4M3_PC};
  // decode: n = 1 from DRAM; decodehot: n = 1 on one matrix that stays in L3 (kernel speed without
  // the memory limit); prefill: n = 64, 512.
  for (const char* kind : {"decode", "decodehot", "prefill"}) {
    for (DType type : types) {
      for (cpu::Isa isa : {cpu::Isa::Scalar, cpu::Isa::Avx2, cpu::Isa::Avx512}) {
        if (cpu::kernels_for(isa) == nullptr) continue;
        for (int64_t n : std::string(kind) != "prefill" ? std::vector<int64_t>{1} : std::vector<int64_t>{64, 512}) {
          if (isa == cpu::Isa::Scalar && n > 64) continue;  // minutes per iteration
          for (int threads : {1, 2}) {
            const bool cold = std::string(kind) == "decode";
            const std::string name = std::string(kind) + "/" + std::string(dtype_name(type)) + "/" +
                                     std::string(cpu::isa_name(isa)) + "/n:" + std::to_string(n) +
                                     "/threads:" + std::to_string(threads);
            benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { run_matmul(s, type, isa, n, threads, cold); })
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
          }
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
