#include "model/model_config.h"

#include "core/error.h"
#include "loader/gguf_reader.h"

namespace kestrel {
namespace {

int64_t require_positive(const gguf::GgufFile& file, const std::string& key) {
  const uint64_t value = file.require_uint(key);
  if (value == 0 || value > (uint64_t(1) << 31)) {
    fail("{}: metadata key '{}' has an invalid value {}", file.name(), key, value);
  }
  return int64_t(value);
}

}  // namespace

ModelConfig read_llama_config(const gguf::GgufFile& file) {
  ModelConfig c;
  c.architecture = file.require_string("general.architecture");
  c.name = file.get_string("general.name").value_or("");
  const std::string p = c.architecture + ".";
  c.n_embd = require_positive(file, p + "embedding_length");
  c.n_layer = require_positive(file, p + "block_count");
  c.n_ff = require_positive(file, p + "feed_forward_length");
  c.n_head = require_positive(file, p + "attention.head_count");
  c.n_head_kv = file.get_uint(p + "attention.head_count_kv") ? require_positive(file, p + "attention.head_count_kv")
                                                            : c.n_head;
  c.n_ctx_train = require_positive(file, p + "context_length");
  if (c.n_embd % c.n_head != 0 && !file.get_uint(p + "attention.key_length")) {
    fail("{}: {}embedding_length {} is not divisible by attention.head_count {}", file.name(), p,
         c.n_embd, c.n_head);
  }
  c.head_dim = file.get_uint(p + "attention.key_length") ? require_positive(file, p + "attention.key_length")
                                                        : c.n_embd / c.n_head;
  if (auto value_length = file.get_uint(p + "attention.value_length");
      value_length && int64_t(*value_length) != c.head_dim) {
    fail("{}: attention.value_length {} differs from key_length {}; not supported", file.name(),
         *value_length, c.head_dim);
  }
  if (c.n_head % c.n_head_kv != 0) {
    fail("{}: attention.head_count {} is not a multiple of attention.head_count_kv {}", file.name(),
         c.n_head, c.n_head_kv);
  }
  c.rms_eps = float(file.require_float(p + "attention.layer_norm_rms_epsilon"));
  if (!(c.rms_eps > 0.0f && c.rms_eps < 1.0f)) {
    fail("{}: attention.layer_norm_rms_epsilon {} is out of range", file.name(), c.rms_eps);
  }
  c.n_rot = int(file.get_uint(p + "rope.dimension_count").value_or(uint64_t(c.head_dim)));
  if (c.n_rot <= 0 || c.n_rot > c.head_dim || c.n_rot % 2 != 0) {
    fail("{}: rope.dimension_count {} must be even and at most the head size {}", file.name(),
         c.n_rot, c.head_dim);
  }
  c.rope_freq_base = float(file.get_float(p + "rope.freq_base").value_or(10000.0));
  if (auto type = file.get_string(p + "rope.scaling.type"); type && *type != "none") {
    if (*type != "linear") {
      fail("{}: rope.scaling.type '{}' is not supported (supported: none, linear)", file.name(), *type);
    }
    const double factor = file.require_float(p + "rope.scaling.factor");
    if (!(factor > 0.0)) fail("{}: rope.scaling.factor {} must be positive", file.name(), factor);
    c.rope_freq_scale = float(1.0 / factor);
  }
  c.n_vocab = 0;  // set from the embedding tensor by the weight loader
  return c;
}

}  // namespace kestrel
