// `kestrel eval`'s measuring stick on a real model (stories260K): a model against itself has KL
// divergence exactly 0, top-1 agreement 1 and the same perplexity as `kestrel perplexity`'s
// computation; against another encoding of itself, the candidate's perplexity is the one
// perplexity gives that encoding alone, and the divergence is positive; reruns are bit-identical.
#include <gtest/gtest.h>

#include <string>

#include "convert/requantize.h"
#include "engine/perplexity.h"
#include "model/model.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

PerplexityResult score(const Model& candidate, const Model* base) {
  const auto tokenizer = Tokenizer::from_gguf(candidate.file());
  const std::string text = test::read_file(test::shared_model_path("text/tinystories_val.txt"));
  const auto tokens = tokenizer->encode(text, true, false);
  PerplexityOptions options;
  options.n_ctx = 256;
  options.max_chunks = 12;
  options.n_batch = 1024;
  options.bos_token = tokenizer->bos_id();
  options.base_model = base;
  return compute_perplexity(candidate, tokens, options, nullptr);
}

TEST(Eval, ModelAgainstItselfIsExactlyZeroAndMatchesPerplexity) {
  const auto model = Model::load(test::shared_model_path("stories260K.gguf"));
  const PerplexityResult alone = score(*model, nullptr);
  const PerplexityResult self = score(*model, model.get());
  ASSERT_TRUE(self.kld.has_value());
  EXPECT_EQ(self.kld->mean, 0.0);
  EXPECT_EQ(self.kld->max, 0.0);
  EXPECT_EQ(self.kld->top1_agreement, 1.0);
  EXPECT_EQ(self.kld->rms_delta_p, 0.0);
  EXPECT_EQ(self.perplexity, alone.perplexity);
  EXPECT_EQ(*self.base_perplexity, alone.perplexity);
  EXPECT_EQ(self.num_scored_tokens, 12 * 127);  // per chunk, tokens n_ctx/2 .. n_ctx-2 predict the next
}

TEST(Eval, AnotherEncodingGivesItsOwnPerplexityAndAPositiveDivergence) {
  const std::string path = test::scratch_dir("eval_q4") + "/stories-q4_0.gguf";
  requantize_gguf(test::shared_model_path("stories260K.gguf"), path, DType::Q4_0, [](const RequantizeNote&) {});
  const auto base = Model::load(test::shared_model_path("stories260K.gguf"));
  const auto q4 = Model::load(path);
  const PerplexityResult alone = score(*q4, nullptr);
  const PerplexityResult vs = score(*q4, base.get());
  const PerplexityResult again = score(*q4, base.get());
  EXPECT_EQ(vs.perplexity, alone.perplexity);
  EXPECT_EQ(*vs.base_perplexity, score(*base, nullptr).perplexity);
  EXPECT_GT(vs.kld->mean, 0.001);
  EXPECT_LT(vs.kld->top1_agreement, 1.0);
  EXPECT_GE(vs.kld->p99, vs.kld->median);
  EXPECT_EQ(vs.kld->mean, again.kld->mean);  // bit-identical rerun
  EXPECT_EQ(vs.kld->p999, again.kld->p999);
}

}  // namespace
}  // namespace kestrel
