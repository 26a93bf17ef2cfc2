// `kestrel imatrix --compute-type W8A8`: the layers' matrices re-encoded in memory for the pass
// (engine/compute_reencoding.h), so the importance matrix comes from slightly different
// activations; on stories260K (F32, real) it must match the F32 model's own matrix channel by
// channel within the drift per-token int8 activations cause, and the model must get its own
// matrices back afterwards.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <string>
#include <vector>

#include "cli_process.h"
#include "convert/imatrix_file.h"
#include "core/thread_pool.h"
#include "engine/compute_reencoding.h"
#include "model/activation_observer.h"
#include "model/model.h"
#include "test_paths.h"

namespace kestrel {
namespace {

std::string calibration_text() { return test::text_excerpt("imatrix_compute_type_text", "text/tinystories_val.txt", 30000); }

TEST(ComputeReencoding, PointsTheLayersAtCopiesAndBackAgain) {
  auto model = Model::load(test::shared_model_path("stories260K.gguf"));
  const WeightView before = model->weights().layers[0].matrix(LinearKind::AttnQ);
  const WeightView down_before = model->weights().layers[4].matrix(LinearKind::FfnDown);
  ASSERT_EQ(before.type, DType::F32);
  ThreadPool pool(2);
  {
    ComputeReencoding w8(*model, DType::W8A8, pool);
    // Five layers of seven matrices and the (untied) head; ffn_down's 172-wide rows cannot hold
    // W8A8's 32-value blocks and keep F32.
    EXPECT_EQ(w8.reencoded(), 5 * 6 + 1);
    EXPECT_EQ(w8.kept(), 5);
    EXPECT_EQ(model->weights().layers[4].matrix(LinearKind::FfnDown).type, DType::F32);
    const WeightView during = model->weights().layers[0].matrix(LinearKind::AttnQ);
    EXPECT_EQ(during.type, DType::W8A8);
    EXPECT_NE(during.data, before.data);
    EXPECT_EQ(model->weights().output.type, DType::W8A8);
    EXPECT_EQ(model->weights().token_embd.type, DType::F32);  // a lookup keeps its table
  }
  EXPECT_EQ(model->weights().output.type, DType::F32);
  EXPECT_EQ(model->weights().layers[0].matrix(LinearKind::AttnQ).data, before.data);
  EXPECT_EQ(model->weights().layers[0].matrix(LinearKind::AttnQ).type, DType::F32);
  EXPECT_EQ(model->weights().layers[4].matrix(LinearKind::FfnDown).data, down_before.data);
  {
    // 64-wide rows cannot hold Q4_K's 256-value blocks: nothing is re-encoded.
    ComputeReencoding q4k(*model, DType::Q4_K, pool);
    EXPECT_EQ(q4k.reencoded(), 0);
    EXPECT_EQ(q4k.kept(), 5 * 7 + 1);
  }
}

ImportanceMatrix run_imatrix(const std::string& out, const std::string& extra, std::string* err = nullptr) {
  const auto run = test::run_kestrel("imatrix " + test::shared_model_path("stories260K.gguf") + " -f " +
                                     calibration_text() + " -c 128 --chunks 8 -t 2 -o " + out + extra);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  if (err != nullptr) *err = run.err;
  return load_imatrix(out);
}

TEST(ImatrixComputeType, W8A8MatchesTheModelsOwnMatrixWithinTheActivationsDrift) {
  const ImportanceMatrix own = run_imatrix(test::scratch_dir("imatrix_ct_own") + "/imatrix.gguf", "");
  std::string err;
  const ImportanceMatrix w8 =
      run_imatrix(test::scratch_dir("imatrix_ct_w8a8") + "/imatrix.gguf", " --compute-type W8A8", &err);
  EXPECT_NE(err.find("computing with the linear layers' matrices in W8A8: 31 re-encoded"), std::string::npos) << err;
  ASSERT_EQ(own.entries.size(), w8.entries.size());
  double worst = 0.0, total = 0.0;
  int differ = 0, channels = 0;
  for (const auto& [name, entry] : own.entries) {
    ASSERT_TRUE(w8.entries.contains(name)) << name;
    const ImatrixEntry& other = w8.entries.at(name);
    EXPECT_EQ(entry.counts, other.counts) << name;
    const std::vector<float> a = entry.mean(), b = other.mean();
    ASSERT_EQ(a.size(), b.size()) << name;
    // Relative to the entry's mean importance, so a near-dead channel's ratio does not dominate.
    double mean_a = 0.0;
    for (float v : a) mean_a += v;
    mean_a /= double(a.size());
    for (size_t c = 0; c < a.size(); ++c) {
      const double d = std::fabs(double(a[c]) - double(b[c])) / mean_a;
      worst = std::max(worst, d);
      total += d;
      ++channels;
      differ += a[c] != b[c];
    }
  }
  EXPECT_GT(differ, 0) << "the re-encoded pass computed exactly what the F32 one did";
  std::printf("per-channel difference relative to the entry's mean: mean %.5f, largest %.5f\n", total / channels, worst);
  EXPECT_LT(total / channels, 0.01);
  EXPECT_LT(worst, 0.10);
}

TEST(ImatrixComputeType, AnUnknownOrActivationTypeIsAClearError) {
  const auto run = test::run_kestrel("imatrix " + test::shared_model_path("stories260K.gguf") + " -f " +
                                     calibration_text() + " -c 128 --chunks 2 -o " +
                                     test::scratch_dir("imatrix_ct_bad") + "/x.gguf --compute-type W9A9");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.err.find("--compute-type W9A9: not a type Kestrel can compute with"), std::string::npos) << run.err;
  const auto activation = test::run_kestrel("imatrix " + test::shared_model_path("stories260K.gguf") + " -f " +
                                            calibration_text() + " -c 128 --chunks 2 -o " +
                                            test::scratch_dir("imatrix_ct_q8k") + "/x.gguf --compute-type Q8_K");
  EXPECT_NE(activation.exit_code, 0);
  EXPECT_NE(activation.err.find("Q8_K is an activation type (no weight kernels)"), std::string::npos) << activation.err;
}

}  // namespace
}  // namespace kestrel
