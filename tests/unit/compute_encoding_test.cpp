// Compute encodings (core/dtype.h: IQ3_S re-encoded as IQ3_S_L4 at load on AVX2):
//  - the re-encoding of gguf-py's IQ3_S fixture (every grid entry) dequantizes to gguf-py's
//    values bit for bit, and the IQ3_S_L4 reference dot equals IQ3_S's bit for bit on random
//    blocks (every byte random, so every entry, sign, high bit and scale code);
//  - a model with IQ3_S matrices loads them re-encoded where the kernel table asks for it (AVX2),
//    keeps them under the tables that do not (scalar), and its logits equal those of the same
//    model computed by the IQ3_S kernels bit for bit;
//  - read into memory instead of mapped, the same logits, and released pages of the copy read back
//    as the file's bytes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>

#include "backend/cpu/kernels.h"
#include "convert/gen_model.h"
#include "core/half.h"
#include "core/mapped_file.h"
#include "isa_env.h"
#include "model/model.h"
#include "quant/blocks.h"
#include "quant/format.h"
#include "quant_fixture.h"
#include "runner/model_runner.h"
#include "test_paths.h"

namespace kestrel {
namespace {

std::vector<uint8_t> transcode(const std::vector<uint8_t>& iq3s, int64_t blocks) {
  std::vector<uint8_t> out(size_t(blocks * quant::require_format(DType::IQ3_S_L4).block_bytes));
  quant::transcode_blocks(DType::IQ3_S, DType::IQ3_S_L4, iq3s.data(), out.data(), blocks);
  return out;
}

TEST(ComputeEncoding, Iq3SLevelsDequantizeToGgufPysValues) {
  const test::QuantFixture f = test::read_quant_fixture("iq3_s.bin");
  ASSERT_EQ(f.ggml_type, uint32_t(DType::IQ3_S));
  const int64_t n = int64_t(f.blocks) * 256;
  const std::vector<uint8_t> levels = transcode(f.raw, f.blocks);
  std::vector<float> values(static_cast<size_t>(n));
  quant::require_format(DType::IQ3_S_L4).dequantize_row(levels.data(), values.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(float_to_bits(values[size_t(i)]), float_to_bits(f.gguf_py[size_t(i)])) << "value " << i;
  }
}

TEST(ComputeEncoding, Iq3SLevelsDotEqualsIq3SDot) {
  std::mt19937 rng(17);
  const int64_t n = 256 * 7;
  const quant::WeightFormat& iq3s = quant::require_format(DType::IQ3_S);
  const quant::WeightFormat& l4 = quant::require_format(DType::IQ3_S_L4);
  const quant::WeightFormat& q8k = quant::require_format(DType::Q8_K);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<uint8_t> row(size_t(quant::row_bytes(iq3s, n)));
    for (uint8_t& b : row) b = uint8_t(rng());
    for (int64_t b = 0; b < n / 256; ++b) {  // a finite d of either sign
      const uint16_t d = float_to_fp16(std::ldexp(dist(rng), -int(rng() % 12)));
      std::memcpy(row.data() + b * iq3s.block_bytes, &d, 2);
    }
    const std::vector<uint8_t> levels = transcode(row, n / 256);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = dist(rng);
    std::vector<uint8_t> a(size_t(quant::row_bytes(q8k, n)));
    q8k.quantize_row(x.data(), a.data(), n);
    ASSERT_EQ(float_to_bits(l4.vec_dot(levels.data(), a.data(), n)), float_to_bits(iq3s.vec_dot(row.data(), a.data(), n)))
        << "trial " << trial;
    std::vector<float> from_iq3s(static_cast<size_t>(n)), from_levels(static_cast<size_t>(n));
    iq3s.dequantize_row(row.data(), from_iq3s.data(), n);
    l4.dequantize_row(levels.data(), from_levels.data(), n);
    ASSERT_EQ(std::memcmp(from_iq3s.data(), from_levels.data(), size_t(n) * 4), 0) << "trial " << trial;
  }
  EXPECT_FALSE(quant::can_transcode(DType::IQ3_XXS, DType::IQ3_S_L4));
  EXPECT_THROW(quant::transcode_blocks(DType::Q4_K, DType::IQ3_S_L4, nullptr, nullptr, 0), Error);
}

// The tiny Llama 2 preset (every matrix's width a multiple of 256) in llama.cpp's IQ3_S mixture:
// the embedding and every layer matrix IQ3_S, the output head Q6_K.
const std::string& iq3s_model() {
  static const std::string path = [] {
    GenModelOptions o;
    o.preset = "tiny";
    o.type = "IQ3_S";
    o.output = test::scratch_dir("compute_encoding_iq3s") + "/model.gguf";
    o.spm_vocab_gguf = test::shared_model_path("llama.cpp-vocab/ggml-vocab-llama-spm.gguf");
    generate_model(o);
    return o.output;
  }();
  return path;
}

// Logits of a 5-token prompt, then of one decoded token (F16 cache, one block).
std::vector<float> prompt_and_step_logits(const Model& model) {
  RunnerConfig rc;
  rc.kv = model.kv_spec(DType::F16, DType::F16, 16);
  rc.group_blocks = {1};
  rc.num_threads = 2;
  ModelRunner runner(model, rc);
  const std::vector<BlockId> table = {0};
  std::vector<float> out;
  const std::vector<TokenId> prompt = {1, 450, 4996, 17354, 1701}, next = {29871};
  for (const auto& [tokens, start] : {std::pair{prompt, 0}, std::pair{next, 5}}) {
    SequenceChunk chunk;
    chunk.tokens = tokens;
    chunk.start_position = start;
    chunk.block_tables = {std::span<const BlockId>(table)};
    chunk.logits_from = 0;
    const std::span<float> logits = runner.execute(std::span<const SequenceChunk>(&chunk, 1));
    out.insert(out.end(), logits.begin(), logits.end());
  }
  return out;
}

TEST(ComputeEncoding, Iq3SModelReencodedOnAvx2WithTheSameLogits) {
  if (cpu::kernels_for(cpu::Isa::Avx2) == nullptr) GTEST_SKIP() << "no AVX2 on this CPU";
  const std::string& path = iq3s_model();
  test::IsaEnv avx2("avx2");
  const auto stored = Model::load(path, {}, {.compute_encodings = false});
  const auto reencoded = Model::load(path);
  int64_t blocks = 0;
  for (size_t il = 0; il < stored->weights().layers.size(); ++il) {
    for (LinearKind kind : kLayerLinearKinds) {
      const WeightView& w = stored->weights().layers[il].matrix(kind);
      blocks += w.rows * w.cols / 256;
      ASSERT_EQ(w.type, DType::IQ3_S);
      EXPECT_EQ(reencoded->weights().layers[il].matrix(kind).type, DType::IQ3_S_L4);
    }
  }
  EXPECT_EQ(reencoded->weights().token_embd.type, DType::IQ3_S) << "a lookup table keeps its type";
  EXPECT_EQ(reencoded->weights().output.type, DType::Q6_K);
  EXPECT_EQ(reencoded->weight_bytes() - stored->weight_bytes(), blocks * (134 - 110)) << "memory estimates see the copies";
  const std::vector<float> a = prompt_and_step_logits(*stored), b = prompt_and_step_logits(*reencoded);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
}

TEST(ComputeEncoding, RepackZeroKeepsIq3S) {
  if (cpu::kernels_for(cpu::Isa::Avx2) == nullptr) GTEST_SKIP() << "no AVX2 on this CPU";
  test::IsaEnv avx2("avx2");
  ASSERT_EQ(cpu_compute_encoding(DType::IQ3_S), DType::IQ3_S_L4);
  setenv("KESTREL_REPACK", "0", 1);
  const auto model = Model::load(iq3s_model());
  const DType kept = cpu_compute_encoding(DType::IQ3_S);
  unsetenv("KESTREL_REPACK");
  EXPECT_EQ(kept, DType::IQ3_S);
  EXPECT_EQ(model->weights().layers[1].w_down.type, DType::IQ3_S);
}

// The re-encoded matrices' file pages are dropped at load; read again, they are the file's bytes.
TEST(ComputeEncoding, ReleasedPagesReadBackFromTheFile) {
  const MappedFile file(iq3s_model());
  ASSERT_GT(file.size(), size_t(3 * 4096));
  const std::vector<uint8_t> before(file.data(), file.data() + file.size());
  file.release(file.data() + 100, file.size() - 200);
  file.release(file.data() + file.size() - 10, 100);  // past the end: left alone
  EXPECT_EQ(std::memcmp(before.data(), file.data(), file.size()), 0);
}

// Read into memory instead: the copy's bytes are the file's, and a released range (mapped back
// from the file in place of the copy) still reads as the file's bytes, not zeros.
TEST(ComputeEncoding, ReleasedPagesOfACopyReadBackFromTheFile) {
  const MappedFile mapped(iq3s_model());
  const MappedFile copied(iq3s_model(), FileResidency::Copied);
  ASSERT_EQ(copied.residency(), FileResidency::Copied);
  ASSERT_EQ(copied.size(), mapped.size());
  ASSERT_NE(copied.data(), mapped.data());
  ASSERT_EQ(std::memcmp(mapped.data(), copied.data(), copied.size()), 0);
  copied.release(copied.data() + 5000, copied.size() / 2);
  copied.release(copied.data() + copied.size() - 10, 100);  // past the end: left alone
  copied.release(mapped.data() + 5000, 9000);               // not inside the copy: left alone
  EXPECT_EQ(std::memcmp(mapped.data(), copied.data(), copied.size()), 0);
}

// The same model with its weights read into memory (the re-encoded matrices' bytes released from
// the copy) and mapped: the same logits bit for bit.
TEST(ComputeEncoding, Iq3SModelInMemoryGivesTheMappedLogits) {
  const std::string& path = iq3s_model();
  const auto mapped = Model::load(path, {}, {.weights = WeightMemory::Mapped});
  const auto in_memory = Model::load(path, {}, {.weights = WeightMemory::InMemory});
  EXPECT_FALSE(mapped->weights_in_memory());
  EXPECT_TRUE(in_memory->weights_in_memory());
  EXPECT_EQ(in_memory->weight_bytes(), mapped->weight_bytes());
  const std::vector<float> a = prompt_and_step_logits(*mapped), b = prompt_and_step_logits(*in_memory);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
}

TEST(ComputeEncoding, ScalarTableKeepsIq3S) {
  test::IsaEnv scalar("scalar");
  const auto model = Model::load(iq3s_model());
  EXPECT_EQ(model->weights().layers[0].wq.type, DType::IQ3_S);
  EXPECT_EQ(cpu_compute_encoding(DType::IQ3_S), DType::IQ3_S);
}

}  // namespace
}  // namespace kestrel
