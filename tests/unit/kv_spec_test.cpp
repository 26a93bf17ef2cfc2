// The KV cache description (core/kv_spec.h): bytes per row, token and block for every type from the
// formats' block layouts, the capacity each type gives in the same memory, and clear errors for
// unknown types and for types a head size cannot use.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/kv_spec.h"

namespace kestrel {
namespace {

KvCacheSpec spec(DType k, DType v, int64_t head_dim, int64_t heads = 8) {
  KvCacheSpec s;
  s.k_type = k;
  s.v_type = v;
  s.n_kv_head = heads;
  s.head_dim = head_dim;
  s.block_size = 16;
  return s;
}

std::string error_of(const KvCacheSpec& s) {
  try {
    validate_kv_spec(s);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(KvSpec, BytesFollowTheBlockLayouts) {
  // Per head of 64 values: F32 256, F16/BF16 128, FP8 64 codes + a 4-byte F32 scale, Q8_0 two
  // blocks of 2 + 32 bytes, Q4_0 two blocks of 2 + 16.
  EXPECT_EQ(spec(DType::F32, DType::F32, 64).k_row_bytes(), 256);
  EXPECT_EQ(spec(DType::F16, DType::F16, 64).k_row_bytes(), 128);
  EXPECT_EQ(spec(DType::BF16, DType::BF16, 64).k_row_bytes(), 128);
  EXPECT_EQ(spec(DType::FP8_E4M3_PC, DType::FP8_E4M3_PC, 64).k_row_bytes(), 68);
  EXPECT_EQ(spec(DType::Q8_0, DType::Q8_0, 64).k_row_bytes(), 68);
  EXPECT_EQ(spec(DType::Q4_0, DType::Q4_0, 64).k_row_bytes(), 36);
  // K and V chosen independently.
  const KvCacheSpec mixed = spec(DType::Q8_0, DType::F16, 64, 8);
  EXPECT_EQ(mixed.token_bytes(), 8 * (68 + 128));
  EXPECT_EQ(mixed.block_bytes(), 16 * 8 * (68 + 128));
  EXPECT_EQ(mixed.describe(), "q8_0/f16");
}

// The same memory holds >= 2x (f16), >= 3.7x (q8_0, fp8) and >= 6.5x (q4_0) the tokens of f32, for
// the head sizes of the models Kestrel runs (64: Qwen2.5-0.5B, Llama 3.2 1B; 128: Qwen2.5-1.5B,
// Llama 3 8B; 256: Gemma 3).
TEST(KvSpec, CapacityAgainstF32) {
  for (int64_t hd : {64, 128, 256}) {
    const double f32 = double(spec(DType::F32, DType::F32, hd).token_bytes());
    auto ratio = [&](DType t) { return f32 / double(spec(t, t, hd).token_bytes()); };
    EXPECT_DOUBLE_EQ(ratio(DType::F16), 2.0) << hd;
    EXPECT_DOUBLE_EQ(ratio(DType::BF16), 2.0) << hd;
    EXPECT_GE(ratio(DType::Q8_0), 3.7) << hd;
    EXPECT_GE(ratio(DType::FP8_E4M3_PC), 3.7) << hd;
    EXPECT_GE(ratio(DType::Q4_0), 6.5) << hd;
  }
}

TEST(KvSpec, NamesParseAndUnknownTypesListTheTypes) {
  EXPECT_EQ(parse_kv_type("f16"), DType::F16);
  EXPECT_EQ(parse_kv_type("Q8_0"), DType::Q8_0);
  EXPECT_EQ(parse_kv_type("fp8"), DType::FP8_E4M3_PC);
  EXPECT_EQ(parse_kv_type("q4_0"), DType::Q4_0);
  for (DType t : kv_types()) EXPECT_EQ(parse_kv_type(kv_type_name(t)), t);
  try {
    parse_kv_type("q3_k");
    FAIL() << "q3_k is not a KV type";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("unknown KV cache type 'q3_k'"), std::string::npos) << message;
    EXPECT_NE(message.find("f32, f16, bf16, fp8, q8_0, q4_0"), std::string::npos) << message;
  }
}

TEST(KvSpec, HeadSizeMustFitTheTypesBlock) {
  EXPECT_EQ(error_of(spec(DType::Q8_0, DType::Q4_0, 64)), "");
  EXPECT_EQ(error_of(spec(DType::F16, DType::FP8_E4M3_PC, 8)), "");
  // stories260K's head size is 8: the 32-value blocks cannot hold it.
  const std::string e = error_of(spec(DType::Q8_0, DType::F16, 8));
  EXPECT_NE(e.find("q8_0 stores 32 values per block"), std::string::npos) << e;
  EXPECT_NE(e.find("head size is 8"), std::string::npos) << e;
  EXPECT_NE(error_of(spec(DType::F16, DType::Q4_0, 48)).find("V cache"), std::string::npos);
  // A weight-only format is not a KV type.
  EXPECT_NE(error_of(spec(DType::Q4_K, DType::F16, 256)).find("not a KV cache type"), std::string::npos);
}

TEST(KvSpec, RotationAndSinksAreChecked) {
  KvCacheSpec s = spec(DType::Q4_0, DType::Q4_0, 96);
  s.rotate = true;
  EXPECT_NE(error_of(s).find("power of two"), std::string::npos);
  s.head_dim = 128;
  EXPECT_EQ(error_of(s), "");
  s.rolling_window = 512;
  s.sink_tokens = 512;
  EXPECT_NE(error_of(s).find("must be fewer than the window"), std::string::npos) << error_of(s);
  s.sink_tokens = 4;
  EXPECT_EQ(error_of(s), "");
}

}  // namespace
}  // namespace kestrel
