#include "core/kv_spec.h"

#include <algorithm>
#include <array>
#include <cctype>

#include <fmt/format.h>

#include "core/error.h"

namespace kestrel {
namespace {

struct KvTypeName {
  DType type;
  std::string_view name;
};

constexpr std::array<KvTypeName, 6> kKvTypes{{
    {DType::F32, "f32"},
    {DType::F16, "f16"},
    {DType::BF16, "bf16"},
    {DType::FP8_E4M3_PC, "fp8"},
    {DType::Q8_0, "q8_0"},
    {DType::Q4_0, "q4_0"},
}};

constexpr std::array<DType, 6> kKvTypeList{DType::F32, DType::F16, DType::BF16, DType::FP8_E4M3_PC,
                                           DType::Q8_0, DType::Q4_0};

bool is_kv_type(DType type) {
  return std::find(kKvTypeList.begin(), kKvTypeList.end(), type) != kKvTypeList.end();
}

}  // namespace

std::span<const DType> kv_types() { return kKvTypeList; }

std::string_view kv_type_name(DType type) {
  for (const KvTypeName& t : kKvTypes) {
    if (t.type == type) return t.name;
  }
  return dtype_name(type);
}

std::string kv_type_list() {
  std::string list;
  for (const KvTypeName& t : kKvTypes) list += fmt::format("{}{}", list.empty() ? "" : ", ", t.name);
  return list;
}

DType parse_kv_type(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  for (const KvTypeName& t : kKvTypes) {
    if (t.name == lower) return t.type;
  }
  if (lower == "fp8_e4m3" || lower == "e4m3") return DType::FP8_E4M3_PC;
  fail("unknown KV cache type '{}' (choose one of: {})", name, kv_type_list());
}

std::string KvCacheSpec::describe() const {
  std::string s = k_type == v_type || value_in_key ? std::string(kv_type_name(k_type))
                                   : fmt::format("{}/{}", kv_type_name(k_type), kv_type_name(v_type));
  if (rotate) s += " rotated";
  if (value_in_key) s += " (latent: V in K)";
  return s;
}

void validate_kv_spec(const KvCacheSpec& spec) {
  for (const auto& [what, type] : {std::pair{"K", spec.k_type}, std::pair{"V", spec.v_type}}) {
    if (!is_kv_type(type)) {
      fail("{} cache type {} is not a KV cache type (choose one of: {})", what, dtype_name(type), kv_type_list());
    }
    const int64_t block = dtype_layout(type).block_size;
    if (spec.head_dim <= 0 || spec.head_dim % block != 0) {
      fail("KV cache type {} stores {} values per block, but this model's head size is {}: use f16, "
           "bf16, fp8 or f32 for its {} cache",
           kv_type_name(type), block, spec.head_dim, what);
    }
  }
  if (spec.value_in_key && spec.v_type != spec.k_type) {
    fail("this model's values are part of its keys (latent attention stores one latent per token): the V cache "
         "type ({}) must equal the K type ({})", kv_type_name(spec.v_type), kv_type_name(spec.k_type));
  }
  if (spec.value_in_key && spec.rotate) {
    fail("--kv-rotate cannot be used with latent attention: its values are the keys' rows, so rotating the keys "
         "would rotate the values too");
  }
  if (spec.value_in_key && spec.sink_tokens > 0) {
    fail("--attention-sinks cannot be used with latent attention yet: re-rotating a sink's query assumes the "
         "rotary dimensions lead each head, and a latent head keeps them last");
  }
  if (spec.n_kv_head <= 0) fail("internal: a KV cache needs at least one KV head");
  if (spec.block_size <= 0) fail("KV block size must be positive, got {}", spec.block_size);
  if (spec.rotate && (spec.head_dim & (spec.head_dim - 1)) != 0) {
    fail("--kv-rotate needs a head size that is a power of two; this model's is {}", spec.head_dim);
  }
  if (spec.sink_tokens < 0) fail("--attention-sinks must not be negative, got {}", spec.sink_tokens);
  if (spec.rolling_window > 0 && spec.sink_tokens >= spec.rolling_window) {
    fail("--attention-sinks {} must be fewer than the window (--ctx {}): the window holds the sinks "
         "and the recent tokens",
         spec.sink_tokens, spec.rolling_window);
  }
  if (spec.rolling_window == 0 && spec.sink_tokens > 0) {
    fail("internal: attention sinks without a rolling window");
  }
}

}  // namespace kestrel
