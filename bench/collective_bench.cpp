// Latency of the collectives the forward pass makes, between the ranks of one mpirun job: the
// per-layer all-reduce of one hidden row (decode), of a prefill chunk's rows, and the gathers of
// --tp-deterministic. Prints p50/p90/p99 in microseconds from rank 0. Run as
//   mpirun -np 2 build/release/bench/collective_bench [--floats 4096] [--iters 5000]
// (KESTREL_COMM_SHM=0 forces MPI's own messages instead of the shared-memory path.)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <CLI/CLI.hpp>

#include "dist/parallel.h"

namespace {

void report(kestrel::Communicator& world, const char* what, int64_t floats, std::vector<double> us) {
  if (world.rank() != 0) return;
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[std::min(us.size() - 1, size_t(q * double(us.size())))]; };
  std::printf("%-28s %8lld floats (%7.1f KiB): p50 %8.1f us  p90 %8.1f us  p99 %8.1f us\n", what, (long long)floats,
              double(floats) * 4.0 / 1024.0, at(0.5), at(0.9), at(0.99));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("collective latency between the ranks of an mpirun job");
  int64_t floats = 4096;
  int iters = 5000;
  app.add_option("--floats", floats, "hidden row width (4096: a 7B/8B model)");
  app.add_option("--iters", iters, "timed repetitions");
  CLI11_PARSE(app, argc, argv);
  try {
    kestrel::ParallelConfig config;
    config.tp = 1;
    if (const char* size = std::getenv("OMPI_COMM_WORLD_SIZE")) config.tp = std::atoi(size);
    if (const char* size = std::getenv("PMI_SIZE")) config.tp = std::atoi(size);
    auto parallel = kestrel::ParallelContext::init(config);
    kestrel::Communicator& tp = parallel->tp();
    if (tp.rank() == 0) std::printf("%d ranks over %s\n", tp.size(), tp.describe().c_str());
    using Clock = std::chrono::steady_clock;
    auto time_it = [&](auto&& op) {
      std::vector<double> us;
      for (int i = 0; i < iters + iters / 10; ++i) {
        tp.barrier();
        const auto start = Clock::now();
        op();
        const double t = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
        if (i >= iters / 10) us.push_back(t);  // the first tenth warms up
      }
      return us;
    };
    for (int64_t n : {floats, floats * 32}) {
      std::vector<float> row(size_t(n), 1.0f + float(tp.rank()));
      report(parallel->world(), n == floats ? "all-reduce (decode row)" : "all-reduce (32 rows)", n,
             time_it([&] { tp.all_reduce_sum(row); }));
    }
    std::vector<float> mine(size_t(floats / tp.size()), 1.0f), all(size_t(floats / tp.size() * tp.size()));
    std::vector<int64_t> counts(size_t(tp.size()), floats / tp.size());
    report(parallel->world(), "all-gather (decode row)", floats, time_it([&] { tp.all_gather(mine, all, counts); }));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collective_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
