// `kestrel imatrix` and a head tied to the token embedding (the SmolLM3 fixture has no
// output.weight): the head's input is recorded under "token_embd.weight" (llama-imatrix records
// no entry for it, and a lookup has no inputs of its own), over the rows whose logits the
// perplexity computes (the second half of each chunk; every row with --process-output), and
// `kestrel quantize --imatrix` weighs the embedding by it and its first norm's gamma^2 together
// (without an imatrix, by gamma^2 alone).
// An untied model (stories260K) gets no embedding entry, and its head's only with --process-output.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "cli_process.h"
#include "convert/imatrix_file.h"
#include "test_paths.h"

namespace kestrel {
namespace {

std::string calibration_text() { return test::text_excerpt("imatrix_tied_text", "text/wikitext-2-test.txt", 20000); }

// `kestrel imatrix` over 4 chunks of 64 tokens into `out`.
ImportanceMatrix run_imatrix(const std::string& model, const std::string& out, const std::string& extra) {
  const auto run = test::run_kestrel("imatrix " + model + " -f " + calibration_text() + " -c 64 --chunks 4 -t 2 -o " +
                                     out + extra);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  return load_imatrix(out);
}

TEST(ImatrixTiedHead, IsRecordedUnderTheEmbeddingsNameAndWeighsItsQuantization) {
  const std::string model = test::test_data_path("arch/smollm3/model.gguf");
  const std::string imatrix = test::scratch_dir("imatrix_tied_scored") + "/imatrix.gguf";
  const ImportanceMatrix scored = run_imatrix(model, imatrix, "");
  ASSERT_TRUE(scored.entries.contains("token_embd.weight"));
  EXPECT_FALSE(scored.entries.contains("output.weight"));
  const ImatrixEntry& head = scored.entries.at("token_embd.weight");
  EXPECT_EQ(head.counts, std::vector<int64_t>{4 * 32});  // the scored half of 4 chunks of 64
  EXPECT_EQ(head.n_in(), scored.entries.at("blk.0.attn_q.weight").n_in());
  EXPECT_EQ(scored.entries.at("blk.0.attn_q.weight").counts, std::vector<int64_t>{4 * 64});
  const std::vector<float> mean = head.mean();
  int distinct = 0;
  for (float v : mean) {
    ASSERT_TRUE(std::isfinite(v) && v > 0.0f);
    distinct += std::fabs(v - mean[0]) > 1e-3f * mean[0];
  }
  EXPECT_GT(distinct, int(mean.size()) / 2);

  const ImportanceMatrix every_row =
      run_imatrix(model, test::scratch_dir("imatrix_tied_all") + "/imatrix.gguf", " --process-output");
  EXPECT_EQ(every_row.entries.at("token_embd.weight").counts, std::vector<int64_t>{4 * 64});

  // The quantizer reports how the embedding was weighted: both of its roles.
  const std::string out = test::scratch_dir("imatrix_tied_quantize") + "/q.gguf";
  const auto q = test::run_kestrel("quantize " + model + " " + out + " Q8_0 --token-embedding-type IQ4_NL --imatrix " +
                                   imatrix + " -t 2");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_NE(q.err.find("importance: token_embd.weight: the tied output head's importance and blk.0.attn_norm.weight^2"),
            std::string::npos)
      << q.err;
  // Without an imatrix the embedding still gets its lookup's importance, from the model itself.
  const auto plain = test::run_kestrel("quantize " + model + " " + out + " Q8_0 --token-embedding-type IQ4_NL -t 2");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.err.find("importance: token_embd.weight: no imatrix entry (a lookup has no inputs): weighted by "
                           "blk.0.attn_norm.weight^2"),
            std::string::npos)
      << plain.err;
}

TEST(ImatrixTiedHead, AnUntiedModelsEmbeddingHasNoEntry) {
  const std::string model = test::shared_model_path("stories260K.gguf");
  const ImportanceMatrix plain = run_imatrix(model, test::scratch_dir("imatrix_untied") + "/imatrix.gguf", "");
  EXPECT_FALSE(plain.entries.contains("token_embd.weight"));
  EXPECT_FALSE(plain.entries.contains("output.weight"));
  const ImportanceMatrix with_head =
      run_imatrix(model, test::scratch_dir("imatrix_untied_head") + "/imatrix.gguf", " --process-output");
  EXPECT_FALSE(with_head.entries.contains("token_embd.weight"));
  ASSERT_TRUE(with_head.entries.contains("output.weight"));
  EXPECT_EQ(with_head.entries.at("output.weight").counts, std::vector<int64_t>{4 * 64});
}

}  // namespace
}  // namespace kestrel
