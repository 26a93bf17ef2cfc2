// The one description of a paged KV cache: the element types of K and V, the block size, the KV
// heads and head size, and the streaming settings (attention sinks over a rolling window). Every
// byte count of the cache comes from here: the runner's allocation, the engine's budget split, the
// CLI's memory plan and the server's metrics.
//
// Layout of one layer's cache (K and V each): [n_kv_head][num_blocks * block_size] rows, a row being
// one head of one token in the type's row layout (core/dtype.h): head_dim values, with the type's
// scales inside the row (FP8: an F32 scale per token and head; Q8_0/Q4_0: an F16 scale per 32
// values). Scales travel with their row, so paging, prefix caching, block freeing and sharing work
// unchanged for every type.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/dtype.h"

namespace kestrel {

struct KvCacheSpec {
  DType k_type = DType::F16;
  DType v_type = DType::F16;
  int block_size = 16;
  int64_t n_kv_head = 0;
  int64_t head_dim = 0;
  // Hadamard rotation of K and Q per head (orthonormal, so q . k is unchanged; spreads outliers
  // before K is quantized).
  bool rotate = false;
  // Latent attention (DeepSeek-V2's MLA): a token's value is the first part of its key, so only K
  // is stored and V reads K's rows (v_type must equal k_type).
  bool value_in_key = false;
  // Streaming (StreamingLLM): when rolling_window > 0, full-attention layers see the first
  // sink_tokens positions plus the most recent rolling_window - sink_tokens, and a sequence may
  // run past the window with bounded memory. rolling_window == 0: off.
  int64_t rolling_window = 0;
  int sink_tokens = 0;
  // The longest sequence the cache serves (the engine's max_model_len); 0: the model's training
  // context. LongRoPE models pick their RoPE factors by it, so it is fixed for the cache's life.
  int64_t context_length = 0;

  // Bytes of one row (one token, one KV head) of K / of V.
  int64_t k_row_bytes() const { return dtype_row_bytes(k_type, head_dim); }
  int64_t v_row_bytes() const { return dtype_row_bytes(v_type, head_dim); }
  // K plus V of one token in one layer (K alone when value_in_key).
  int64_t token_bytes() const { return n_kv_head * (k_row_bytes() + (value_in_key ? 0 : v_row_bytes())); }
  // K plus V of one block in one layer.
  int64_t block_bytes() const { return int64_t(block_size) * token_bytes(); }
  // "f16" or "q8_0/q4_0" (K/V) for logs.
  std::string describe() const;
};

// The KV types, in the order the CLI lists them: f32, f16, bf16, fp8, q8_0, q4_0.
std::span<const DType> kv_types();
// The CLI name of a KV type ("f16", "fp8", ...).
std::string_view kv_type_name(DType type);
// Parses a KV type name (case-insensitive); a clear error listing the types otherwise.
DType parse_kv_type(std::string_view name);
// "f32, f16, bf16, fp8, q8_0, q4_0".
std::string kv_type_list();

// Throws a kestrel::Error if the spec cannot hold this model's K/V: an unknown type, a head size
// that is not a multiple of a type's block (e.g. q8_0 needs multiples of 32), a rotation of a
// head size that is not a power of two, or sinks that do not fit the window.
void validate_kv_spec(const KvCacheSpec& spec);

}  // namespace kestrel
