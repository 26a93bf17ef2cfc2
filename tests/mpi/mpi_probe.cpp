// Runs two sequences through a model split over the ranks of an mpirun job (or one process) and
// writes rank 0's logits of every step: the multi-rank tests (tests/e2e/distributed_test.cpp)
// compare them with one process's, bitwise or by greedy token. The tokens fed back are the
// greedy ones, or a reference file's (--force), so that every step of two runs is comparable.
//
//   [mpirun -np N] mpi_probe MODEL OUT [--tp T --pp P --tp-deterministic -n STEPS --force REF]
//
// OUT: int32 n_seq, n_steps, n_vocab; then per step and sequence int32 token, float[n_vocab].
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "dist/parallel.h"
#include "runner/model_runner.h"
#include "runner/rank_group.h"
#include "tokenizer/tokenizer.h"

using namespace kestrel;

int main(int argc, char** argv) {
  CLI::App app("logits of a split model, for the multi-rank tests");
  std::string model_path, out_path, force_path, kv_type = "f16";
  ParallelConfig pc;
  int steps = 64, threads = 1;
  app.add_option("model", model_path)->required();
  app.add_option("out", out_path)->required();
  app.add_option("--tp", pc.tp);
  app.add_option("--pp", pc.pp);
  app.add_flag("--tp-deterministic", pc.tp_deterministic);
  app.add_option("--pp-microbatches", pc.micro_batches);
  app.add_option("--collective-timeout", pc.timeout_seconds);
  app.add_option("-n", steps);
  app.add_option("-t", threads);
  app.add_option("--force", force_path, "feed this reference file's tokens instead of the greedy ones");
  app.add_option("--kv-type", kv_type);
  CLI11_PARSE(app, argc, argv);
  std::unique_ptr<ParallelContext> parallel;
  try {
    parallel = ParallelContext::init(pc);
    ShardRequest request{pc.tp, parallel->tp_rank(), pc.pp, parallel->pp_rank(), pc.tp_deterministic};
    const auto model = Model::load(model_path, request);
    const DType kv = parse_kv_type(kv_type);
    RunnerConfig config;
    config.num_threads = threads;
    config.kv = model->kv_spec(kv, kv);
    config.parallel = parallel.get();
    if (!parallel->is_root()) {
      run_worker(*model, *parallel, config);
      return 0;
    }
    const auto tokenizer = Tokenizer::from_gguf(model->file());
    const std::vector<std::vector<TokenId>> prompts = {
        tokenizer->encode("Once upon a time, there was a", true, false),
        tokenizer->encode("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.", true, false)};
    const int n_seq = int(prompts.size());
    const int bs = config.kv.block_size;
    size_t longest = 0;
    for (const auto& p : prompts) longest = std::max(longest, p.size());
    const int64_t blocks_per_seq = (int64_t(longest) + steps + bs - 1) / bs + 1;
    const int num_groups = int(model->kv_layout().group_windows.size());
    config.group_blocks.assign(size_t(num_groups), blocks_per_seq * n_seq);
    ModelRunner runner(*model, config);
    std::vector<std::vector<BlockId>> tables(static_cast<size_t>(n_seq));
    for (int s = 0; s < n_seq; ++s) {
      for (int64_t b = 0; b < blocks_per_seq; ++b) tables[size_t(s)].push_back(BlockId(s * blocks_per_seq + b));
    }
    std::vector<int32_t> forced;
    if (!force_path.empty()) {
      std::ifstream in(force_path, std::ios::binary);
      int32_t header[3];
      in.read(reinterpret_cast<char*>(header), sizeof(header));
      std::vector<float> row(static_cast<size_t>(header[2]));
      for (int64_t i = 0; i < int64_t(header[0]) * header[1]; ++i) {
        int32_t token = 0;
        in.read(reinterpret_cast<char*>(&token), sizeof(token));
        in.read(reinterpret_cast<char*>(row.data()), std::streamsize(row.size() * sizeof(float)));
        forced.push_back(token);
      }
      if (!in) fail("cannot read {}", force_path);
    }
    const int64_t n_vocab = model->config().n_vocab;
    std::ofstream out(out_path, std::ios::binary);
    const int32_t header[3] = {n_seq, steps, int32_t(n_vocab)};
    out.write(reinterpret_cast<const char*>(header), sizeof(header));
    std::vector<std::vector<TokenId>> seqs = prompts;
    for (int step = 0; step < steps; ++step) {
      std::vector<SequenceChunk> chunks;
      for (int s = 0; s < n_seq; ++s) {
        SequenceChunk c;
        const auto& seq = seqs[size_t(s)];
        // Step 0: the whole prompt (a prefill the pipeline cuts in pieces); then one token.
        const size_t start = step == 0 ? 0 : seq.size() - 1;
        c.tokens = std::span<const TokenId>(seq).subspan(start);
        c.start_position = int64_t(start);
        for (int g = 0; g < num_groups; ++g) c.block_tables.push_back(tables[size_t(s)]);
        c.logits_from = int64_t(c.tokens.size()) - 1;
        chunks.push_back(c);
      }
      const std::span<float> logits = runner.execute(chunks);
      for (int s = 0; s < n_seq; ++s) {
        const float* row = logits.data() + int64_t(s) * n_vocab;
        int32_t token = int32_t(std::max_element(row, row + n_vocab) - row);
        const size_t at = size_t(step) * size_t(n_seq) + size_t(s);
        if (!forced.empty()) token = forced.at(at);
        out.write(reinterpret_cast<const char*>(&token), sizeof(token));
        out.write(reinterpret_cast<const char*>(row), std::streamsize(n_vocab * sizeof(float)));
        seqs[size_t(s)].push_back(token);
      }
    }
    if (!out) fail("cannot write {}", out_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_probe: %s\n", e.what());
    if (parallel && parallel->distributed()) parallel->world().abort_group(1);
    return 1;
  }
  return 0;
}
