// Hyper-parameters of a decoder-only transformer, read from GGUF metadata.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kestrel::gguf {
class GgufFile;
}

namespace kestrel {

struct ModelConfig {
  std::string architecture;  // general.architecture, e.g. "llama"
  std::string name;          // general.name, if any
  int64_t n_vocab = 0;
  int64_t n_embd = 0;        // hidden size
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;      // key/value length per head
  int64_t n_ff = 0;          // MLP intermediate size
  int64_t n_ctx_train = 0;   // context length the model was trained for
  float rms_eps = 1e-5f;
  int n_rot = 0;             // rotary dimensions per head
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;
  bool rope_neox = false;

  int64_t q_width() const { return n_head * head_dim; }
  int64_t kv_width() const { return n_head_kv * head_dim; }
  // K and V bytes one token takes in an F32 cache, over all layers.
  int64_t kv_bytes_per_token() const { return 2 * n_layer * kv_width() * int64_t(sizeof(float)); }
};

// Reads `<arch>.*` keys for the Llama family. Missing or inconsistent keys are errors naming the
// file and the key.
ModelConfig read_llama_config(const gguf::GgufFile& file);

}  // namespace kestrel
