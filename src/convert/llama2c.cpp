#include "convert/llama2c.h"

#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/progress.h"
#include "loader/gguf_writer.h"

namespace kestrel {
namespace {

// Reads consecutive F32 arrays out of the checkpoint, checking each against the file size.
class WeightCursor {
 public:
  explicit WeightCursor(const MappedFile& file) : file_(file), offset_(7 * sizeof(int32_t)) {}

  std::span<const uint8_t> take(int64_t count, const char* what) {
    const uint64_t bytes = uint64_t(count) * sizeof(float);
    if (offset_ + bytes > file_.size()) {
      fail("{}: truncated checkpoint: {} needs {} bytes at offset {}, file has {}", file_.path(),
           what, bytes, offset_, file_.size());
    }
    std::span<const uint8_t> span(file_.data() + offset_, size_t(bytes));
    offset_ += bytes;
    return span;
  }
  void skip(int64_t count, const char* what) { take(count, what); }

 private:
  const MappedFile& file_;
  uint64_t offset_;
};

Llama2cHeader read_header(const MappedFile& file) {
  if (file.size() < 7 * sizeof(int32_t)) fail("{}: too small for a llama2.c header", file.path());
  int32_t fields[7];
  std::memcpy(fields, file.data(), sizeof fields);
  Llama2cHeader h{fields[0], fields[1], fields[2], fields[3], fields[4], fields[5], fields[6], true};
  if (h.vocab_size < 0) {
    h.vocab_size = -h.vocab_size;
    h.shared_classifier = false;
  }
  const bool sane = h.dim > 0 && h.dim <= 65536 && h.hidden_dim > 0 && h.hidden_dim <= 1 << 20 &&
                    h.n_layers > 0 && h.n_layers <= 1024 && h.n_heads > 0 && h.n_kv_heads > 0 &&
                    h.n_kv_heads <= h.n_heads && h.dim % h.n_heads == 0 &&
                    h.n_heads % h.n_kv_heads == 0 && h.vocab_size > 0 &&
                    h.vocab_size <= 1 << 22 && h.seq_len > 0;
  if (!sane) {
    fail("{}: not a llama2.c checkpoint (implausible header dim={} hidden={} layers={} heads={} "
         "kv_heads={} vocab={} seq_len={})",
         file.path(), h.dim, h.hidden_dim, h.n_layers, h.n_heads, h.n_kv_heads, h.vocab_size,
         h.seq_len);
  }
  return h;
}

struct Llama2cVocab {
  std::vector<std::string> pieces;
  std::vector<float> scores;
};

// tokenizer.bin: int32 max_token_length, then per token: f32 score, int32 length, bytes.
Llama2cVocab read_vocab(const std::string& path, int32_t vocab_size) {
  MappedFile file(path);
  size_t offset = sizeof(int32_t);
  if (file.size() < offset) fail("{}: too small for a llama2.c tokenizer", path);
  Llama2cVocab vocab;
  for (int32_t i = 0; i < vocab_size; ++i) {
    float score;
    int32_t length;
    if (offset + 8 > file.size()) fail("{}: truncated tokenizer at token {}", path, i);
    std::memcpy(&score, file.data() + offset, 4);
    std::memcpy(&length, file.data() + offset + 4, 4);
    offset += 8;
    if (length < 0 || size_t(length) > file.size() - offset) {
      fail("{}: token {} has a bad length {}", path, i, length);
    }
    vocab.pieces.emplace_back(reinterpret_cast<const char*>(file.data() + offset), size_t(length));
    vocab.scores.push_back(score);
    offset += size_t(length);
  }
  return vocab;
}

// llama2.c stores spaces as ' ' and BOS/EOS as "\n<s>\n" / "\n</s>\n"; GGUF's SentencePiece
// vocabularies use U+2581 for space and plain "<s>" / "</s>".
void add_tokenizer_metadata(gguf::GgufWriter& writer, const Llama2cVocab& vocab) {
  std::vector<gguf::Value> tokens, scores, types;
  for (size_t id = 0; id < vocab.pieces.size(); ++id) {
    std::string piece = vocab.pieces[id];
    int32_t type = 1;  // normal
    if (id == 0) {
      piece = "<unk>";
      type = 2;
    } else if (id == 1 || id == 2) {
      piece = id == 1 ? "<s>" : "</s>";
      type = 3;
    } else if (piece.size() == 6 && piece.starts_with("<0x") && piece.back() == '>') {
      type = 6;
    } else {
      std::string replaced;
      for (char ch : piece) replaced += ch == ' ' ? std::string("\xe2\x96\x81") : std::string(1, ch);
      piece = replaced;
    }
    tokens.push_back(gguf::Value::of_string(piece));
    scores.push_back(gguf::Value::of_f32(vocab.scores[id]));
    types.push_back(gguf::Value::of_i32(type));
  }
  writer.set_string("tokenizer.ggml.model", "llama");
  writer.set("tokenizer.ggml.tokens", gguf::Value::of_array(gguf::ValueType::String, std::move(tokens)));
  writer.set("tokenizer.ggml.scores", gguf::Value::of_array(gguf::ValueType::Float32, std::move(scores)));
  writer.set("tokenizer.ggml.token_type", gguf::Value::of_array(gguf::ValueType::Int32, std::move(types)));
  writer.set_u32("tokenizer.ggml.unknown_token_id", 0);
  writer.set_u32("tokenizer.ggml.bos_token_id", 1);
  writer.set_u32("tokenizer.ggml.eos_token_id", 2);
}

}  // namespace

void convert_llama2c_to_gguf(const std::string& checkpoint_path, const std::string& tokenizer_path,
                             const std::string& output_path) {
  MappedFile file(checkpoint_path);
  const Llama2cHeader h = read_header(file);
  const int64_t head_size = h.dim / h.n_heads;
  const int64_t kv_dim = head_size * h.n_kv_heads;
  const int64_t L = h.n_layers;

  WeightCursor cursor(file);
  auto embedding = cursor.take(int64_t(h.vocab_size) * h.dim, "token embedding");
  auto rms_att = cursor.take(L * h.dim, "rms_att_weight");
  auto wq = cursor.take(L * h.dim * h.dim, "wq");
  auto wk = cursor.take(L * kv_dim * h.dim, "wk");
  auto wv = cursor.take(L * kv_dim * h.dim, "wv");
  auto wo = cursor.take(L * h.dim * h.dim, "wo");
  auto rms_ffn = cursor.take(L * h.dim, "rms_ffn_weight");
  auto w1 = cursor.take(L * h.hidden_dim * h.dim, "w1");
  auto w2 = cursor.take(L * h.dim * h.hidden_dim, "w2");
  auto w3 = cursor.take(L * h.hidden_dim * h.dim, "w3");
  auto rms_final = cursor.take(h.dim, "rms_final_weight");
  cursor.skip(int64_t(h.seq_len) * head_size / 2, "freq_cis_real");  // RoPE tables: recomputed
  cursor.skip(int64_t(h.seq_len) * head_size / 2, "freq_cis_imag");
  auto classifier = h.shared_classifier ? embedding
                                        : cursor.take(int64_t(h.vocab_size) * h.dim, "wcls");

  gguf::GgufWriter writer;
  writer.set_string("general.architecture", "llama");
  writer.set_string("general.name", "llama");
  writer.set_u32("general.file_type", 0);  // all F32
  writer.set_u32("llama.context_length", uint32_t(h.seq_len));
  writer.set_u32("llama.embedding_length", uint32_t(h.dim));
  writer.set_u32("llama.feed_forward_length", uint32_t(h.hidden_dim));
  writer.set_u32("llama.attention.head_count", uint32_t(h.n_heads));
  writer.set_u32("llama.attention.head_count_kv", uint32_t(h.n_kv_heads));
  writer.set_u32("llama.block_count", uint32_t(h.n_layers));
  writer.set_u32("llama.rope.dimension_count", uint32_t(head_size));
  writer.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  add_tokenizer_metadata(writer, read_vocab(tokenizer_path, h.vocab_size));

  // llama2.c's interleaved RoPE equals GGUF "llama" normal-order RoPE, so Q/K need no permutation,
  // and llama2.c matrices are already [out][in] row-major, which is GGUF's layout.
  auto slice = [](std::span<const uint8_t> all, int64_t layer, int64_t floats) {
    return all.subspan(size_t(layer * floats) * sizeof(float), size_t(floats) * sizeof(float));
  };
  writer.add_tensor_view("token_embd.weight", DType::F32, {h.dim, h.vocab_size}, embedding);
  writer.add_tensor_view("output_norm.weight", DType::F32, {h.dim}, rms_final);
  writer.add_tensor_view("output.weight", DType::F32, {h.dim, h.vocab_size}, classifier);
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    writer.add_tensor_view(p + "attn_q.weight", DType::F32, {h.dim, h.dim}, slice(wq, l, h.dim * h.dim));
    writer.add_tensor_view(p + "attn_k.weight", DType::F32, {h.dim, kv_dim}, slice(wk, l, kv_dim * h.dim));
    writer.add_tensor_view(p + "attn_v.weight", DType::F32, {h.dim, kv_dim}, slice(wv, l, kv_dim * h.dim));
    writer.add_tensor_view(p + "attn_output.weight", DType::F32, {h.dim, h.dim}, slice(wo, l, h.dim * h.dim));
    writer.add_tensor_view(p + "attn_norm.weight", DType::F32, {h.dim}, slice(rms_att, l, h.dim));
    writer.add_tensor_view(p + "ffn_gate.weight", DType::F32, {h.dim, h.hidden_dim},
                           slice(w1, l, h.hidden_dim * h.dim));
    writer.add_tensor_view(p + "ffn_down.weight", DType::F32, {h.hidden_dim, h.dim},
                           slice(w2, l, h.dim * h.hidden_dim));
    writer.add_tensor_view(p + "ffn_up.weight", DType::F32, {h.dim, h.hidden_dim},
                           slice(w3, l, h.hidden_dim * h.dim));
    writer.add_tensor_view(p + "ffn_norm.weight", DType::F32, {h.dim}, slice(rms_ffn, l, h.dim));
  }
  writer.write(output_path);
}

}  // namespace kestrel
