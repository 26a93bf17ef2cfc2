// tokenizer.json (+ tokenizer_config.json) -> GGUF tokenizer.ggml.* metadata, so a Hugging Face
// folder's tokenizer is built by the same code as a GGUF file's. Byte-level BPE (Llama 3, Qwen)
// becomes a "gpt2" vocabulary with merges and a named pre-tokenizer; SentencePiece-style BPE with
// byte fallback (Gemma, Llama 2, Mistral) becomes a "llama" vocabulary whose scores encode the merge
// order (the earlier a merge, the higher its result's score).
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "loader/hf_folder.h"

namespace kestrel {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// GGUF token types.
constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6;

json read_optional_json(const fs::path& path) {
  if (!fs::exists(path)) return nullptr;
  std::ifstream in(path);
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", path.string(), e.what());
  }
}

// Collects every pre-tokenizer of a (possibly nested) Sequence.
void flatten(const json& node, std::vector<json>& out) {
  if (!node.is_object()) return;
  if (node.value("type", "") == "Sequence") {
    for (const json& child : node.value("pretokenizers", node.value("normalizers", json::array()))) flatten(child, out);
  } else {
    out.push_back(node);
  }
}

std::string special_token_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

// Which of the pre-tokenizers Kestrel (and llama.cpp) know this is, from its split expression.
std::string pre_tokenizer_name(const std::vector<json>& pre, const std::string& path) {
  for (const json& p : pre) {
    if (p.value("type", "") != "Split") continue;
    const json& pattern = p["pattern"];
    const std::string regex = pattern.is_object() ? pattern.value("Regex", pattern.value("String", "")) : "";
    if (regex.find("\\p{N}{1,3}") != std::string::npos) return "llama-bpe";
    if (regex.find("(?i:'s|'t|'re|'ve|'m|'ll|'d)") != std::string::npos && regex.find("\\p{N}|") != std::string::npos) {
      return "qwen2";
    }
    fail("{}: unsupported pre-tokenizer split expression {}", path, regex);
  }
  return "gpt-2";  // a plain ByteLevel pre-tokenizer uses GPT-2's expression
}

}  // namespace

void append_hf_tokenizer_metadata(const std::string& folder, std::vector<gguf::KeyValue>& metadata) {
  const fs::path tokenizer_path = fs::path(folder) / "tokenizer.json";
  const json tok = read_optional_json(tokenizer_path);
  if (tok.is_null()) fail("{}: missing tokenizer.json", folder);
  const std::string path = tokenizer_path.string();
  const json config = read_optional_json(fs::path(folder) / "tokenizer_config.json");
  const json model_config = read_optional_json(fs::path(folder) / "config.json");
  auto set = [&](std::string key, gguf::Value v) { metadata.push_back({std::move(key), std::move(v)}); };

  const json& model = tok.value("model", json::object());
  if (model.value("type", "") != "BPE") {
    fail("{}: tokenizer model type '{}' is not supported (BPE only)", path, model.value("type", "?"));
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) fail("{}: model.vocab is missing", path);

  // Tokens by id: the BPE vocabulary, then the added (special) tokens, padded to the model's
  // embedding size.
  std::map<int64_t, std::pair<std::string, int32_t>> by_id;
  for (const auto& [text, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) fail("{}: token '{}' has a bad id", path, text);
    by_id[id.get<int64_t>()] = {text, kNormal};
  }
  for (const json& added : tok.value("added_tokens", json::array())) {
    const int64_t id = added.value("id", int64_t(-1));
    if (id < 0) fail("{}: an added token has no id", path);
    by_id[id] = {added.value("content", ""), added.value("special", false) ? kControl : kUserDefined};
  }
  int64_t count = by_id.empty() ? 0 : by_id.rbegin()->first + 1;
  if (model_config.is_object()) {
    const json& text_config = model_config.contains("text_config") ? model_config["text_config"] : model_config;
    count = std::max<int64_t>(count, text_config.value("vocab_size", int64_t(0)));
  }
  std::vector<std::string> tokens(static_cast<size_t>(count));
  std::vector<int32_t> types(static_cast<size_t>(count), kUnused);
  for (int64_t i = 0; i < count; ++i) tokens[size_t(i)] = fmt::format("[PAD{}]", i);
  for (const auto& [id, entry] : by_id) {
    tokens[size_t(id)] = entry.first;
    types[size_t(id)] = entry.second;
  }

  std::vector<std::string> merges;
  for (const json& m : model.value("merges", json::array())) {
    if (m.is_string()) {
      merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    } else {
      fail("{}: a merge must be \"a b\" or [a, b]", path);
    }
  }

  std::vector<json> pre, norm;
  flatten(tok.value("pre_tokenizer", json()), pre);
  flatten(tok.value("normalizer", json()), norm);
  bool byte_level = false;
  for (const json& p : pre) byte_level = byte_level || p.value("type", "") == "ByteLevel";

  auto token_id = [&](const std::string& text) -> int64_t {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] == text) return int64_t(i);
    }
    return -1;
  };
  std::vector<gguf::Value> token_values, type_values;
  for (size_t i = 0; i < tokens.size(); ++i) token_values.push_back(gguf::Value::of_string(tokens[i]));

  if (byte_level) {
    set("tokenizer.ggml.model", gguf::Value::of_string("gpt2"));
    set("tokenizer.ggml.pre", gguf::Value::of_string(pre_tokenizer_name(pre, path)));
    std::vector<gguf::Value> merge_values;
    for (const auto& m : merges) merge_values.push_back(gguf::Value::of_string(m));
    set("tokenizer.ggml.merges", gguf::Value::of_array(gguf::ValueType::String, std::move(merge_values)));
  } else if (model.value("byte_fallback", false)) {
    set("tokenizer.ggml.model", gguf::Value::of_string("llama"));
    set("tokenizer.ggml.pre", gguf::Value::of_string("default"));
    // Score = -(rank of the merge that makes the token): SentencePiece merges the highest score
    // first, which is then the lowest rank, as Hugging Face's BPE does.
    std::vector<float> scores(tokens.size(), 0.0f);
    std::vector<bool> scored(tokens.size(), false);
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < tokens.size(); ++i) index.emplace(tokens[i], i);
    for (size_t r = 0; r < merges.size(); ++r) {
      const size_t space = merges[r].find(' ');
      if (space == std::string::npos) fail("{}: merge {} has no space", path, r);
      const auto it = index.find(merges[r].substr(0, space) + merges[r].substr(space + 1));
      if (it != index.end() && !scored[it->second]) {
        scores[it->second] = -float(r + 1);
        scored[it->second] = true;
      }
    }
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::string& t = tokens[i];
      if (types[i] == kNormal && t.size() == 6 && t.rfind("<0x", 0) == 0 && t.back() == '>') types[i] = kByte;
    }
    std::vector<gguf::Value> score_values;
    for (float s : scores) score_values.push_back(gguf::Value::of_f32(s));
    set("tokenizer.ggml.scores", gguf::Value::of_array(gguf::ValueType::Float32, std::move(score_values)));
    bool prepends = false;
    for (const json& n : norm) prepends = prepends || n.value("type", "") == "Prepend";
    for (const json& p : pre) {
      prepends = prepends || (p.value("type", "") == "Metaspace" && p.value("prepend_scheme", "always") != "never");
    }
    set("tokenizer.ggml.add_space_prefix", gguf::Value::of_bool(prepends));
  } else {
    fail("{}: unsupported tokenizer: neither byte-level BPE nor BPE with byte fallback", path);
  }
  const std::string unk = model.value("unk_token", json()).is_string() ? model["unk_token"].get<std::string>() : "";
  if (!unk.empty()) {
    if (const int64_t id = token_id(unk); id >= 0) {
      types[size_t(id)] = kUnknown;
      set("tokenizer.ggml.unknown_token_id", gguf::Value::of_u32(uint32_t(id)));
    }
  }
  for (int32_t t : types) type_values.push_back(gguf::Value::of_i32(t));
  set("tokenizer.ggml.tokens", gguf::Value::of_array(gguf::ValueType::String, std::move(token_values)));
  set("tokenizer.ggml.token_type", gguf::Value::of_array(gguf::ValueType::Int32, std::move(type_values)));

  // BOS/EOS: tokenizer_config.json names them; config.json gives ids as a fallback.
  auto special_id = [&](const char* name, const char* config_key) -> int64_t {
    if (config.is_object() && config.contains(name)) {
      const std::string text = special_token_text(config[name]);
      if (!text.empty()) {
        if (const int64_t id = token_id(text); id >= 0) return id;
      }
    }
    if (model_config.is_object() && model_config.contains(config_key) && model_config[config_key].is_number_integer()) {
      return model_config[config_key].get<int64_t>();
    }
    return -1;
  };
  const int64_t bos = special_id("bos_token", "bos_token_id");
  const int64_t eos = special_id("eos_token", "eos_token_id");
  if (bos >= 0) set("tokenizer.ggml.bos_token_id", gguf::Value::of_u32(uint32_t(bos)));
  if (eos >= 0) set("tokenizer.ggml.eos_token_id", gguf::Value::of_u32(uint32_t(eos)));
  // Whether BOS is added: tokenizer_config's add_bos_token, else the post-processor's template.
  bool add_bos = false;
  if (config.is_object() && config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) {
    add_bos = config["add_bos_token"].get<bool>();
  } else if (tok.contains("post_processor") && tok["post_processor"].is_object()) {
    // A TemplateProcessing, alone or inside a Sequence (Llama 3: [ByteLevel, TemplateProcessing]).
    const json& post = tok["post_processor"];
    std::vector<json> processors = {post};
    if (post.value("type", "") == "Sequence") processors = post.value("processors", json::array()).get<std::vector<json>>();
    for (const json& p : processors) {
      if (!p.is_object() || p.value("type", "") != "TemplateProcessing") continue;
      const json& single = p.value("single", json::array());
      add_bos = !single.empty() && single[0].contains("SpecialToken");
    }
  }
  set("tokenizer.ggml.add_bos_token", gguf::Value::of_bool(add_bos && bos >= 0));
  set("tokenizer.ggml.add_eos_token",
      gguf::Value::of_bool(config.is_object() && config.value("add_eos_token", false)));

  // The chat template: tokenizer_config.json's chat_template, or chat_template.jinja.
  std::string chat_template;
  if (config.is_object() && config.contains("chat_template")) {
    const json& t = config["chat_template"];
    if (t.is_string()) {
      chat_template = t.get<std::string>();
    } else if (t.is_array()) {
      for (const json& named : t) {
        if (named.value("name", "") == "default") chat_template = named.value("template", "");
      }
    }
  }
  if (chat_template.empty() && fs::exists(fs::path(folder) / "chat_template.jinja")) {
    std::ifstream in(fs::path(folder) / "chat_template.jinja");
    chat_template.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (!chat_template.empty()) set("tokenizer.chat_template", gguf::Value::of_string(chat_template));
}

}  // namespace kestrel
