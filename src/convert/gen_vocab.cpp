#include "convert/gen_vocab.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "core/error.h"
#include "loader/gguf_reader.h"
#include "loader/gguf_writer.h"
#include "tokenizer/byte_alphabet.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

using gguf::Value;
using gguf::ValueType;

Value string_array(std::vector<std::string> strings) {
  std::vector<Value> items;
  items.reserve(strings.size());
  for (std::string& s : strings) items.push_back(Value::of_string(std::move(s)));
  return Value::of_array(ValueType::String, std::move(items));
}

}  // namespace

std::vector<std::string> merges_from_tiktoken_ranks(std::span<const std::string> token_bytes) {
  std::unordered_map<std::string_view, int32_t> rank_of;
  rank_of.reserve(token_bytes.size());
  for (size_t rank = 0; rank < token_bytes.size(); ++rank) {
    rank_of.emplace(token_bytes[rank], int32_t(rank));  // first rank wins a duplicate
  }
  std::vector<std::string> merges;
  merges.reserve(token_bytes.size() * 2);
  std::vector<std::pair<int32_t, int32_t>> splits;  // (rank of left, rank of right)
  for (const std::string& token : token_bytes) {
    const std::string_view bytes = token;
    splits.clear();
    for (size_t cut = 1; cut < bytes.size(); ++cut) {
      const auto left = rank_of.find(bytes.substr(0, cut));
      const auto right = rank_of.find(bytes.substr(cut));
      if (left != rank_of.end() && right != rank_of.end()) {
        splits.emplace_back(left->second, right->second);
      }
    }
    std::sort(splits.begin(), splits.end());
    for (const auto& [left, right] : splits) {
      merges.push_back(tokenizer::bytes_to_alphabet(token_bytes[size_t(left)]) + " " +
                       tokenizer::bytes_to_alphabet(token_bytes[size_t(right)]));
    }
  }
  return merges;
}

int64_t set_llama3_vocab(gguf::GgufWriter& writer, const std::string& tiktoken_path) {
  // The tiktoken reader gives the tokens in the byte alphabet with the special tokens appended.
  const VocabData vocab = Tokenizer::from_tiktoken_llama3(tiktoken_path)->vocab();
  std::vector<std::string> rank_bytes;
  std::vector<Value> types;
  types.reserve(vocab.tokens.size());
  for (size_t i = 0; i < vocab.tokens.size(); ++i) {
    if (vocab.types[i] == TokenType::Normal) {
      if (rank_bytes.size() != i) fail("{}: a special token comes before rank {}", tiktoken_path, i);
      rank_bytes.push_back(tokenizer::alphabet_to_bytes(vocab.tokens[i]));
    }
    types.push_back(Value::of_i32(int32_t(vocab.types[i])));
  }
  std::vector<std::string> merges = merges_from_tiktoken_ranks(rank_bytes);

  writer.set_string("tokenizer.ggml.model", "gpt2");
  writer.set_string("tokenizer.ggml.pre", "llama-bpe");
  writer.set("tokenizer.ggml.tokens", string_array(vocab.tokens));
  writer.set("tokenizer.ggml.token_type", Value::of_array(ValueType::Int32, std::move(types)));
  writer.set("tokenizer.ggml.merges", string_array(std::move(merges)));
  writer.set_u32("tokenizer.ggml.bos_token_id", uint32_t(vocab.bos_id));  // <|begin_of_text|>
  writer.set_u32("tokenizer.ggml.eos_token_id", uint32_t(vocab.eos_id));  // <|end_of_text|>
  writer.set_u32("tokenizer.ggml.eot_token_id", uint32_t(vocab.eot_id));  // <|eot_id|>
  writer.set_bool("tokenizer.ggml.add_bos_token", true);
  writer.set_bool("tokenizer.ggml.add_eos_token", false);
  return int64_t(vocab.tokens.size());
}

int64_t copy_gguf_vocab(gguf::GgufWriter& writer, const std::string& gguf_path) {
  const auto file = gguf::GgufFile::open(gguf_path);
  const gguf::Array* tokens = file->get_array("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->items.empty()) {
    fail("{}: no vocabulary (tokenizer.ggml.tokens) to copy", gguf_path);
  }
  for (const gguf::KeyValue& kv : file->metadata()) {
    if (kv.key.starts_with("tokenizer.")) writer.set(kv.key, kv.value);
  }
  return int64_t(tokens->items.size());
}

}  // namespace kestrel
