// The KL divergence of a candidate model from a base on TinyStories text after its first
// `skip_bytes` (the calibration part the quantization tests use), in chunks of 128 tokens: how the
// calibrated-quantization tests judge a file on text it was not calibrated on.
#pragma once

#include <cstdint>
#include <string>

#include "engine/perplexity.h"
#include "model/model.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::test {

inline KlDivergence tinystories_divergence(const std::string& base_path, const std::string& candidate_path,
                                           size_t skip_bytes, int64_t chunks, DType kv = DType::F16) {
  const auto base = Model::load(base_path);
  const auto candidate = Model::load(candidate_path);
  const auto tokenizer = Tokenizer::from_gguf(base->file());
  const std::string text = read_file(shared_model_path("text/tinystories_val.txt"));
  const auto tokens = tokenizer->encode(text.substr(skip_bytes), true, false);
  PerplexityOptions options;
  options.n_ctx = 128;
  options.max_chunks = chunks;
  options.bos_token = tokenizer->vocab().add_bos ? tokenizer->bos_id() : -1;
  options.base_model = base.get();
  options.kv = candidate->kv_spec(kv, kv);
  return *compute_perplexity(*candidate, tokens, options, nullptr).kld;
}

}  // namespace kestrel::test
