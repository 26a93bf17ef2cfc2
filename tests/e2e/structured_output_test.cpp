// Structured output on stories260K's real vocabulary and model: the token masks of a choice list
// and of a regex equal an independent oracle (a token is allowed exactly when its bytes extend the
// output to a prefix of the language, stop tokens exactly when the output is complete), at every
// step of a walk and after rollbacks; the mask comes before temperature and top-k; sampled JSON
// under a schema always parses and satisfies it (the model alone never writes JSON); speculative
// decoding (n-gram drafts and a draft model) under a grammar gives plain decoding's tokens; bad
// constraints are clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "convert/requantize.h"
#include "core/error.h"
#include "core/utf8.h"
#include "engine/engine.h"
#include "grammar/grammar_compiler.h"
#include "grammar/grammar_matcher.h"
#include "loader/gguf_reader.h"
#include "server/structured_request.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

using grammar::Constraint;
using grammar::ConstraintKind;
using grammar::GrammarMaskProcessor;

size_t utf8_length(const std::string& s) { return utf8_split_chars(s).size(); }

// A vocabulary with its grammar compiler.
struct Vocab {
  const Tokenizer* tokenizer;
  int32_t n_vocab;
  const grammar::GrammarCompiler* compiler;
};

// The oracle: tokens whose bytes extend `prefix` to a prefix of the language, plus the stop
// tokens when `prefix` is a complete output. Tokens without text are never allowed.
template <typename IsPrefix, typename IsComplete>
std::vector<TokenId> oracle(const Vocab& v, const std::string& prefix, IsPrefix is_prefix, IsComplete is_complete) {
  std::vector<TokenId> allowed;
  const std::vector<TokenId> stops = v.tokenizer->stop_token_ids();
  for (TokenId t = 0; t < v.n_vocab; ++t) {
    const bool stop = std::find(stops.begin(), stops.end(), t) != stops.end();
    if (stop) {
      if (is_complete(prefix)) allowed.push_back(t);
      continue;
    }
    const std::string piece = t < v.tokenizer->vocab_size() ? v.tokenizer->token_to_piece(t, false) : "";
    if (!piece.empty() && is_prefix(prefix + piece)) allowed.push_back(t);
  }
  return allowed;
}

// Walks towards `target` (the longest allowed token that is a prefix of what is left), checking
// the mask against the oracle at every step; returns the walk's tokens.
template <typename IsPrefix, typename IsComplete>
std::vector<TokenId> walk_and_check(const Vocab& v, const Constraint& c, const std::string& target, IsPrefix is_prefix,
                                    IsComplete is_complete) {
  const std::vector<TokenId> prompt = v.tokenizer->encode("Once upon a time", true, false);
  GrammarMaskProcessor processor(v.compiler->compile(c), prompt.size());
  std::vector<TokenId> history = prompt;
  std::string text;
  for (int step = 0; step < 64; ++step) {
    const std::vector<TokenId> allowed = processor.allowed_tokens(history);
    EXPECT_EQ(allowed, oracle(v, text, is_prefix, is_complete)) << "after \"" << text << "\"";
    if (text == target) {
      EXPECT_TRUE(processor.completed(history));
      break;
    }
    TokenId best = -1;
    size_t best_len = 0;
    for (TokenId t : allowed) {
      const std::string piece = v.tokenizer->token_to_piece(t, false);
      if (piece.size() > best_len && target.compare(text.size(), piece.size(), piece) == 0) {
        best = t;
        best_len = piece.size();
      }
    }
    if (best < 0) {
      ADD_FAILURE() << "no allowed token continues \"" << text << "\" towards \"" << target << "\"";
      break;
    }
    history.push_back(best);
    text += v.tokenizer->token_to_piece(best, false);
  }
  EXPECT_EQ(text, target);
  return {history.begin() + std::ptrdiff_t(prompt.size()), history.end()};
}

// The engine settings of these tests: 2 threads, a 512-token context, 32 MiB of K/V.
EngineConfig stories_config() {
  EngineConfig config;
  config.num_threads = 2;
  config.max_model_len = 512;
  config.kv_memory_bytes = int64_t(32) << 20;
  return config;
}

// A draft model: stories260K with every matrix in Q4_0 (close to it, but not the same).
std::unique_ptr<Model> q4_0_draft() {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("kestrel_grammar_draft_" + std::to_string(::getpid()) + ".gguf")).string();
  requantize_gguf(test::shared_model_path("stories260K.gguf"), path, DType::Q4_0, [](const RequantizeNote&) {});
  std::unique_ptr<Model> draft = Model::load(path);
  std::filesystem::remove(path);
  return draft;
}

// Drafting with `draft`, 4 tokens, always (the mechanism under test, not the policy).
SpecConfig draft_model_spec(const Model* draft) {
  SpecConfig s;
  s.method = SpecMethod::DraftModel;
  s.draft_model = draft;
  s.num_spec_tokens = 4;
  s.adaptive = false;
  return s;
}

// Four seeded requests of `prompt` under `grammar` through one engine built from `config`.
struct GrammarRun {
  std::vector<std::vector<TokenId>> outputs;  // in request order
  std::vector<FinishReason> finish;           // in request order
  int steps = 0;
  SpecStats stats;  // when the engine speculates
};

GrammarRun run_grammar(const Model& model, const Tokenizer& tokenizer, const std::vector<TokenId>& prompt,
                       std::shared_ptr<const grammar::CompiledGrammar> grammar, EngineConfig config, float temperature,
                       int max_tokens) {
  LLMEngine engine(model, config, tokenizer.stop_token_ids());
  std::map<RequestId, std::vector<TokenId>> outputs;
  std::map<RequestId, FinishReason> finish;
  for (int seed = 1; seed <= 4; ++seed) {
    RequestSpec spec;
    spec.prompt = prompt;
    spec.max_tokens = max_tokens;
    spec.sampling.temperature = temperature;
    spec.sampling.seed = uint64_t(seed);
    spec.grammar = grammar;
    outputs[engine.add_request(spec)] = {};
  }
  GrammarRun run;
  while (engine.has_unfinished()) {
    ++run.steps;
    for (const RequestOutput& out : engine.step()) {
      for (const SampleResult& s : out.new_tokens) outputs[out.id].push_back(s.token);
      if (out.finished) finish[out.id] = out.finish_reason;
    }
  }
  EXPECT_EQ(engine.kv().num_free_blocks(), engine.kv().num_blocks());
  if (engine.speculator() != nullptr) run.stats = engine.speculator()->stats();
  for (auto& [id, tokens] : outputs) run.outputs.push_back(tokens);
  for (auto& [id, reason] : finish) run.finish.push_back(reason);
  return run;
}

class StructuredStories : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = test::shared_model_path("stories260K.gguf");
    model_ = Model::load(path).release();
    tokenizer_ = Tokenizer::from_gguf(model_->file()).release();
    compiler_ = new grammar::GrammarCompiler(*tokenizer_, model_->config().n_vocab, tokenizer_->stop_token_ids());
  }
  static void TearDownTestSuite() {
    delete compiler_;
    delete tokenizer_;
    delete model_;
  }
  static Vocab vocab() { return {tokenizer_, int32_t(model_->config().n_vocab), compiler_}; }
  template <typename IsPrefix, typename IsComplete>
  static std::vector<TokenId> oracle(const std::string& prefix, IsPrefix is_prefix, IsComplete is_complete) {
    return kestrel::oracle(vocab(), prefix, is_prefix, is_complete);
  }
  template <typename IsPrefix, typename IsComplete>
  static std::vector<TokenId> walk_and_check(const Constraint& c, const std::string& target, IsPrefix is_prefix,
                                             IsComplete is_complete) {
    return kestrel::walk_and_check(vocab(), c, target, is_prefix, is_complete);
  }

  static Model* model_;
  static Tokenizer* tokenizer_;
  static grammar::GrammarCompiler* compiler_;
};
Model* StructuredStories::model_ = nullptr;
Tokenizer* StructuredStories::tokenizer_ = nullptr;
grammar::GrammarCompiler* StructuredStories::compiler_ = nullptr;

const std::vector<std::string> kChoices = {"yes", "no", "maybe later", "\"quoted\\\""};

bool choice_prefix(const std::string& s) {
  return std::any_of(kChoices.begin(), kChoices.end(), [&](const std::string& c) { return c.rfind(s, 0) == 0; });
}
bool choice_complete(const std::string& s) { return std::find(kChoices.begin(), kChoices.end(), s) != kChoices.end(); }

// The language [0-9]{3}-[a-z]+, by hand: its prefixes are [0-9]{0,3} and [0-9]{3}-[a-z]*.
bool digits_then_letters(const std::string& s, bool need_letter) {
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (i < 3 ? !(c >= '0' && c <= '9') : i == 3 ? c != '-' : !(c >= 'a' && c <= 'z')) return false;
  }
  return need_letter ? s.size() >= 5 : true;
}
bool regex_prefix(const std::string& s) { return digits_then_letters(s, false); }
bool regex_complete(const std::string& s) { return digits_then_letters(s, true); }

// (Once upon a time, [a-z ]{1,40}\. ){2,4}The end\. by hand.
bool story_complete(const std::string& s) {
  const std::string head = "Once upon a time, ", tail = "The end.";
  size_t pos = 0;
  int sentences = 0;
  while (s.compare(pos, head.size(), head) == 0) {
    pos += head.size();
    size_t n = 0;
    while (pos < s.size() && ((s[pos] >= 'a' && s[pos] <= 'z') || s[pos] == ' ')) ++pos, ++n;
    if (n < 1 || n > 40 || s.compare(pos, 2, ". ") != 0) return false;
    pos += 2;
    ++sentences;
  }
  return sentences >= 2 && sentences <= 4 && s.substr(pos) == tail;
}

Constraint choice_constraint() {
  Constraint c;
  c.kind = ConstraintKind::Choice;
  c.choices = kChoices;
  return c;
}

Constraint regex_constraint() {
  Constraint c;
  c.kind = ConstraintKind::Regex;
  c.text = "[0-9]{3}-[a-z]+";
  return c;
}

TEST_F(StructuredStories, ChoiceMaskEqualsTheOracleAtEveryStep) {
  for (const std::string& target : kChoices) walk_and_check(choice_constraint(), target, choice_prefix, choice_complete);
}

TEST_F(StructuredStories, RegexMaskEqualsTheOracleAtEveryStep) {
  walk_and_check(regex_constraint(), "042-once", regex_prefix, regex_complete);
  // The same language as a GBNF grammar and as a Lark grammar.
  Constraint gbnf;
  gbnf.kind = ConstraintKind::Grammar;
  gbnf.text = "root ::= [0-9] [0-9] [0-9] \"-\" [a-z]+";
  walk_and_check(gbnf, "123-abc", regex_prefix, regex_complete);
  Constraint lark;
  lark.kind = ConstraintKind::Grammar;
  lark.text = "start: /[0-9]{3}-[a-z]+/";
  walk_and_check(lark, "977-z", regex_prefix, regex_complete);
}

TEST_F(StructuredStories, RollbackGivesTheMaskOfAFreshMatcher) {
  const std::vector<TokenId> path = walk_and_check(regex_constraint(), "123-story", regex_prefix, regex_complete);
  ASSERT_GE(path.size(), 4u);
  const std::vector<TokenId> prompt = tokenizer_->encode("Once upon a time", true, false);
  GrammarMaskProcessor processor(compiler_->compile(regex_constraint()), prompt.size());
  auto history = [&](size_t n) {
    std::vector<TokenId> h = prompt;
    h.insert(h.end(), path.begin(), path.begin() + std::ptrdiff_t(n));
    return h;
  };
  (void)processor.allowed_tokens(history(path.size()));
  for (size_t n : {size_t(1), path.size() - 1, size_t(0), size_t(2), path.size()}) {
    GrammarMaskProcessor fresh(compiler_->compile(regex_constraint()), prompt.size());
    EXPECT_EQ(processor.allowed_tokens(history(n)), fresh.allowed_tokens(history(n))) << n << " tokens";
  }
  // A different continuation after a shared prefix (a rejected draft replaced by another token).
  std::vector<TokenId> other = history(1);
  const std::vector<TokenId> allowed = processor.allowed_tokens(other);
  other.push_back(allowed.back());
  GrammarMaskProcessor fresh(compiler_->compile(regex_constraint()), prompt.size());
  EXPECT_EQ(processor.allowed_tokens(other), fresh.allowed_tokens(other));
}

// The engine prepares each step's masks while the forward pass runs (prepare(), another thread);
// sampling then applies them. A prepared mask is the mask of exactly that history: applying it
// with the same history computes nothing more, with another one (a rollback, a longer history) it
// is recomputed, and every logits row equals a fresh matcher's.
TEST_F(StructuredStories, APreparedMaskIsUsedOnlyForItsHistory) {
  const std::vector<TokenId> path = walk_and_check(regex_constraint(), "123-story", regex_prefix, regex_complete);
  ASSERT_GE(path.size(), 4u);
  const std::vector<TokenId> prompt = tokenizer_->encode("Once upon a time", true, false);
  auto history = [&](size_t n) {
    std::vector<TokenId> h = prompt;
    h.insert(h.end(), path.begin(), path.begin() + std::ptrdiff_t(n));
    return h;
  };
  const size_t n_vocab = size_t(model_->config().n_vocab);
  auto masked = [&](GrammarMaskProcessor& p, const std::vector<TokenId>& h) {
    std::vector<float> logits(n_vocab, 0.5f);
    p.apply(logits, h);
    return logits;
  };
  GrammarMaskProcessor processor(compiler_->compile(regex_constraint()), prompt.size());
  for (const auto& [prepared, applied] : std::vector<std::pair<size_t, size_t>>{
           {0, 0}, {1, 1}, {2, 2}, {3, 2}, {1, 3}, {path.size(), path.size()}, {2, 0}}) {
    processor.prepare(history(prepared));
    const int64_t before = processor.masks_computed();
    const std::vector<float> got = masked(processor, history(applied));
    EXPECT_EQ(processor.masks_computed() - before, prepared == applied ? 0 : 1) << prepared << " -> " << applied;
    GrammarMaskProcessor fresh(compiler_->compile(regex_constraint()), prompt.size());
    EXPECT_EQ(got, masked(fresh, history(applied))) << prepared << " -> " << applied;
  }
}

// grammar_accepts checks a document against a compiled schema (the server checks tool-call
// arguments it parsed from free text with it): keys in any order only when asked, enums, bounds,
// unknown keys, whole documents only. xgrammar's any-order grammar does not enforce `required`
// (the server checks that itself).
TEST_F(StructuredStories, GrammarAcceptsChecksWholeDocuments) {
  Constraint c;
  c.kind = ConstraintKind::JsonSchema;
  c.text = R"({"type": "object", "properties": {"unit": {"enum": ["c", "f"]}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
               "required": ["unit"]})";
  c.any_order = true;
  const auto any_order = compiler_->compile(c);
  EXPECT_TRUE(grammar::grammar_accepts(*any_order, R"({"days":3,"unit":"c"})"));
  EXPECT_TRUE(grammar::grammar_accepts(*any_order, R"({"unit": "f"})"));
  EXPECT_TRUE(grammar::grammar_accepts(*any_order, R"({"days":3})")) << "required is not checked in any order";
  for (const char* bad : {R"({"unit":"k"})", R"({"unit":"c","days":9})", R"({"unit":"c")",
                          R"({"unit":"c","x":1})", R"({"unit":"c"} trailing)"}) {
    EXPECT_FALSE(grammar::grammar_accepts(*any_order, bad)) << bad;
  }
  c.any_order = false;
  EXPECT_FALSE(grammar::grammar_accepts(*compiler_->compile(c), R"({"days":3,"unit":"c"})"));
  EXPECT_TRUE(grammar::grammar_accepts(*compiler_->compile(c), R"({"unit":"c","days":3})"));
  EXPECT_FALSE(grammar::grammar_accepts(*compiler_->compile(c), R"({"days":3})")) << "in order, required is checked";
}

TEST_F(StructuredStories, MaskComesBeforeTemperatureAndTopK) {
  const std::vector<TokenId> prompt = tokenizer_->encode("Once upon a time", true, false);
  const std::vector<TokenId> allowed = oracle("12", regex_prefix, regex_complete);
  ASSERT_GT(allowed.size(), 5u);
  std::vector<TokenId> history = prompt;
  history.push_back(tokenizer_->find_token("<0x31>"));
  history.push_back(tokenizer_->find_token("<0x32>"));
  SamplingParams params;
  params.temperature = 0.7f;
  params.top_k = 5;
  Sampler sampler(params);
  sampler.chain().add(std::make_unique<GrammarMaskProcessor>(compiler_->compile(regex_constraint()), prompt.size()));
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(size_t(model_->config().n_vocab));
  for (float& l : logits) l = normal(rng);
  // Expected: softmax over the allowed tokens only, at temperature 0.7, then their top 5.
  std::vector<std::pair<float, TokenId>> candidates;
  for (TokenId t : allowed) candidates.push_back({logits[size_t(t)], t});
  std::sort(candidates.rbegin(), candidates.rend());
  candidates.resize(5);
  double total = 0.0;
  for (const auto& [l, t] : candidates) total += std::exp((l - candidates[0].first) / 0.7);
  TokenDistribution dist;
  sampler.distribution(logits, history, &dist);
  ASSERT_FALSE(dist.one_hot());
  std::map<TokenId, double> expected;
  for (const auto& [l, t] : candidates) expected[t] = std::exp((l - candidates[0].first) / 0.7) / total;
  for (TokenId t = 0; t < model_->config().n_vocab; ++t) {
    const double want = expected.count(t) ? expected[t] : 0.0;
    EXPECT_NEAR(dist.p(t), want, 1e-6) << "token " << t;
  }
}

// Sampled output of a small model that knows no JSON, under a schema: every run ends with a stop
// token, parses and satisfies the schema. Without the grammar none of the runs parses.
TEST_F(StructuredStories, SampledJsonFollowsTheSchema) {
  Constraint c;
  c.kind = ConstraintKind::JsonSchema;
  c.any_whitespace = false;
  c.text = R"({"type": "object",
    "properties": {
      "name": {"type": "string", "minLength": 1, "maxLength": 12},
      "age": {"type": "integer", "minimum": 0, "maximum": 120},
      "pet": {"enum": ["cat", "dog", "none"]},
      "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3}
    },
    "required": ["name", "age", "pet", "tags"]})";
  const auto compiled = compiler_->compile(c);
  const std::vector<TokenId> prompt = tokenizer_->encode("Once upon a time", true, false);
  for (bool constrained : {true, false}) {
    LLMEngine engine(*model_, stories_config(), tokenizer_->stop_token_ids());
    std::map<RequestId, std::vector<TokenId>> outputs;
    std::map<RequestId, FinishReason> finish;
    for (int seed = 1; seed <= 8; ++seed) {
      RequestSpec spec;
      spec.prompt = prompt;
      spec.max_tokens = 300;
      spec.sampling.temperature = 1.0f;
      spec.sampling.seed = uint64_t(seed);
      if (constrained) spec.grammar = compiled;
      outputs[engine.add_request(spec)] = {};
    }
    while (engine.has_unfinished()) {
      for (const RequestOutput& out : engine.step()) {
        for (const SampleResult& s : out.new_tokens) outputs[out.id].push_back(s.token);
        if (out.finished) finish[out.id] = out.finish_reason;
      }
    }
    int parsed = 0;
    for (const auto& [id, tokens] : outputs) {
      const std::string text = tokenizer_->decode(tokens, false);
      const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (!j.is_discarded()) ++parsed;
      if (!constrained) continue;
      EXPECT_EQ(finish[id], FinishReason::Stop) << text;
      ASSERT_FALSE(j.is_discarded()) << text;
      ASSERT_TRUE(j.is_object()) << text;
      EXPECT_EQ(j.size(), 4u) << text;
      ASSERT_TRUE(j["name"].is_string()) << text;
      const size_t name_chars = utf8_length(j["name"].get<std::string>());
      EXPECT_TRUE(name_chars >= 1 && name_chars <= 12) << text;
      ASSERT_TRUE(j["age"].is_number_integer()) << text;
      EXPECT_TRUE(j["age"].get<int64_t>() >= 0 && j["age"].get<int64_t>() <= 120) << text;
      ASSERT_TRUE(j["pet"].is_string()) << text;
      EXPECT_TRUE(std::set<std::string>({"cat", "dog", "none"}).count(j["pet"].get<std::string>())) << text;
      ASSERT_TRUE(j["tags"].is_array()) << text;
      EXPECT_LE(j["tags"].size(), 3u) << text;
      for (const auto& tag : j["tags"]) {
        ASSERT_TRUE(tag.is_string()) << text;
        EXPECT_LE(utf8_length(tag.get<std::string>()), 6u) << text;
      }
    }
    EXPECT_EQ(parsed, constrained ? 8 : 0);
    EXPECT_EQ(engine.kv().num_free_blocks(), engine.kv().num_blocks());
  }
}

// Speculation under a grammar: drafts the grammar refuses are rejected, rows after a rejection
// roll the matcher back, and the output is plain decoding's, token for token.
TEST_F(StructuredStories, SpeculationUnderAGrammarEqualsPlainDecoding) {
  const std::unique_ptr<Model> draft = q4_0_draft();
  Constraint c;
  c.kind = ConstraintKind::Regex;
  c.text = "(Once upon a time, [a-z ]{1,40}\\. ){2,4}The end\\.";
  const auto compiled = compiler_->compile(c);
  const std::vector<TokenId> prompt = tokenizer_->encode("Once upon a time", true, false);
  EngineConfig plain = stories_config();
  plain.grammar_jump_forward = false;
  SpecConfig ngram;
  ngram.method = SpecMethod::Ngram;
  ngram.num_spec_tokens = 4;
  ngram.ngram_min = 1;
  ngram.ngram_max = 3;
  ngram.adaptive = false;
  const SpecConfig model_drafts = draft_model_spec(draft.get());
  for (float temperature : {0.0f, 0.8f}) {
    const auto reference = run_grammar(*model_, *tokenizer_, prompt, compiled, plain, temperature, 200).outputs;
    for (const auto& outputs : reference) {
      // The stop token ends each output; the text before it is a sentence of the language.
      EXPECT_TRUE(story_complete(tokenizer_->decode(outputs, false))) << tokenizer_->decode(outputs, false);
    }
    for (const SpecConfig& s : {ngram, model_drafts}) {
      EngineConfig config = stories_config();
      config.spec = s;
      const GrammarRun run = run_grammar(*model_, *tokenizer_, prompt, compiled, config, temperature, 200);
      EXPECT_EQ(run.outputs, reference) << spec_method_name(s.method) << " at temperature " << temperature;
      EXPECT_GT(run.stats.num_accepted_tokens, 10) << spec_method_name(s.method);
    }
  }
}

// A byte-level BPE vocabulary (Qwen2's 151,936 tokens, from llama.cpp's vocab test file, with
// logits rows 64 wider as a model may pad them): multi-byte characters split over tokens, tokens
// that are half a character, and ids past the tokenizer that must never be allowed.
TEST(StructuredQwen2Vocab, MasksEqualTheOracleOnAByteLevelVocabulary) {
  const auto file = gguf::GgufFile::open(test::shared_model_path("llama.cpp-vocab/ggml-vocab-qwen2.gguf"));
  const auto tokenizer = Tokenizer::from_gguf(*file);
  const int32_t n_vocab = tokenizer->vocab_size() + 64;
  const grammar::GrammarCompiler compiler(*tokenizer, n_vocab, tokenizer->stop_token_ids());
  const Vocab v{tokenizer.get(), n_vocab, &compiler};
  const std::vector<std::string> choices = {"naïve café", "日本語のテキスト", "plain"};
  Constraint c;
  c.kind = ConstraintKind::Choice;
  c.choices = choices;
  auto is_prefix = [&](const std::string& s) {
    return std::any_of(choices.begin(), choices.end(), [&](const std::string& x) { return x.rfind(s, 0) == 0; });
  };
  auto is_complete = [&](const std::string& s) { return std::find(choices.begin(), choices.end(), s) != choices.end(); };
  for (const std::string& target : choices) walk_and_check(v, c, target, is_prefix, is_complete);
  walk_and_check(v, regex_constraint(), "314-abcdef", regex_prefix, regex_complete);
}

// Whether `s` is a prefix of well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing
// past U+10FFFF); `*chars` counts its code points, a truncated last one included.
bool utf8_valid_prefix(const std::string& s, size_t* chars) {
  *chars = 0;
  for (size_t i = 0; i < s.size();) {
    const auto b = [&](size_t k) { return uint8_t(s[k]); };
    const uint8_t lead = b(i);
    size_t len = 1;
    uint8_t lo = 0x80, hi = 0xbf;  // the allowed range of the second byte
    if (lead < 0x80) {
      len = 1;
    } else if (lead >= 0xc2 && lead <= 0xdf) {
      len = 2;
    } else if (lead >= 0xe0 && lead <= 0xef) {
      len = 3;
      if (lead == 0xe0) lo = 0xa0;
      if (lead == 0xed) hi = 0x9f;
    } else if (lead >= 0xf0 && lead <= 0xf4) {
      len = 4;
      if (lead == 0xf0) lo = 0x90;
      if (lead == 0xf4) hi = 0x8f;
    } else {
      return false;
    }
    for (size_t k = 1; k < len && i + k < s.size(); ++k) {
      const uint8_t c = b(i + k);
      if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xbf)) return false;
    }
    ++*chars;
    i += len;
  }
  return true;
}

// A counted repetition of a wide character class (what a JSON string with maxLength compiles
// to): xgrammar decides most of the vocabulary there by the repetitions each token uses
// (Kestrel patches that step, cmake/xgrammar/patches). The mask equals the oracle at every step
// of a walk to the bound and at the closing quote, on the byte-level vocabulary, where tokens are
// parts of characters and the budget counts characters, not bytes.
TEST(StructuredQwen2Vocab, CountedRepetitionMasksEqualTheOracle) {
  const auto file = gguf::GgufFile::open(test::shared_model_path("llama.cpp-vocab/ggml-vocab-qwen2.gguf"));
  const auto tokenizer = Tokenizer::from_gguf(*file);
  const int32_t n_vocab = tokenizer->vocab_size();
  const grammar::GrammarCompiler compiler(*tokenizer, n_vocab, tokenizer->stop_token_ids());
  const Vocab v{tokenizer.get(), n_vocab, &compiler};
  constexpr size_t kMax = 6;
  // [^"\\]{0,6}" by hand: up to six characters other than a quote or a backslash, then a quote.
  auto split = [](const std::string& s, std::string* body) {
    const size_t quote = s.find('"');
    *body = s.substr(0, quote);
    return quote;
  };
  auto is_prefix = [&](const std::string& s) {
    std::string body;
    const size_t quote = split(s, &body);
    size_t chars = 0;
    if (body.find('\\') != std::string::npos || !utf8_valid_prefix(body, &chars) || chars > kMax) return false;
    if (quote == std::string::npos) return true;
    return quote + 1 == s.size() && utf8_complete_prefix(body) == body.size();
  };
  auto is_complete = [&](const std::string& s) { return !s.empty() && s.back() == '"' && is_prefix(s); };
  Constraint c;
  c.kind = ConstraintKind::Regex;
  c.text = R"([^"\\]{0,6}")";
  walk_and_check(v, c, "naïve!\"", is_prefix, is_complete);
  walk_and_check(v, c, "日本語\"", is_prefix, is_complete);
  walk_and_check(v, c, "\"", is_prefix, is_complete);
}

// Jump-forward: a schema of long fixed keys; the forced tokens ride along as one-hot drafts. The
// output is token for token what decoding without jump-forward gives (greedy and seeded), in
// fewer engine steps (about 25% fewer here: the story model often spells a forced key with other
// tokens than the greedy longest match, and then its own token wins).
TEST_F(StructuredStories, JumpForwardIsExactAndTakesFewerSteps) {
  Constraint c;
  c.kind = ConstraintKind::JsonSchema;
  c.any_whitespace = false;
  c.text = R"({"type": "object", "properties": {
      "the_name_of_the_main_character": {"type": "string", "maxLength": 8},
      "the_number_of_friends_they_have": {"type": "integer", "minimum": 0, "maximum": 9},
      "their_favourite_colour_of_all": {"enum": ["bright_red_like_a_fire_truck", "deep_blue_like_the_sea"]}},
    "required": ["the_name_of_the_main_character", "the_number_of_friends_they_have", "their_favourite_colour_of_all"]})";
  const auto compiled = compiler_->compile(c);
  const std::vector<TokenId> prompt = tokenizer_->encode("Once upon a time", true, false);
  for (float temperature : {0.0f, 0.8f}) {
    EngineConfig config = stories_config();
    config.grammar_jump_forward = false;
    const GrammarRun plain = run_grammar(*model_, *tokenizer_, prompt, compiled, config, temperature, 300);
    config.grammar_jump_forward = true;
    const GrammarRun jumped = run_grammar(*model_, *tokenizer_, prompt, compiled, config, temperature, 300);
    EXPECT_EQ(jumped.outputs, plain.outputs) << "temperature " << temperature;
    for (const auto& tokens : plain.outputs) {
      const nlohmann::json j = nlohmann::json::parse(tokenizer_->decode(tokens, false), nullptr, false);
      EXPECT_TRUE(j.is_object() && j.size() == 3) << tokenizer_->decode(tokens, false);
    }
    EXPECT_LT(double(jumped.steps), 0.85 * double(plain.steps)) << jumped.steps << " steps with jump-forward, " << plain.steps << " without";
  }
}

// tool_choice auto for Hermes/Qwen-style models: free text, but a call that opens with
// <tool_call> must name an offered function and give arguments of its schema, then close.
TEST_F(StructuredStories, AutoToolCallsAreConstrainedOnceOpened) {
  const std::vector<server::ToolFunction> tools = {
      {"get_weather", nlohmann::ordered_json::parse(R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})")},
      {"get_time", nlohmann::ordered_json::parse(R"({"type": "object", "properties": {}})")}};
  const auto compiled = compiler_->compile(server::hermes_tool_calls_constraint(tools));
  const std::vector<TokenId> prompt = tokenizer_->encode("Once upon a time", true, false);
  GrammarMaskProcessor processor(compiled, prompt.size());
  // The tokens allowed after `text` (reached by the longest allowed token at each step).
  auto allowed_after = [&](const std::string& text) {
    std::vector<TokenId> history = prompt;
    std::string done;
    while (done != text) {
      TokenId best = -1;
      size_t best_len = 0;
      for (TokenId t : processor.allowed_tokens(history)) {
        const std::string piece = tokenizer_->token_to_piece(t, false);
        if (piece.size() > best_len && text.compare(done.size(), piece.size(), piece) == 0) best = t, best_len = piece.size();
      }
      if (best < 0) {
        ADD_FAILURE() << "the constraint refuses \"" << text.substr(done.size()) << "\" after \"" << done << "\"";
        return std::set<std::string>{};
      }
      history.push_back(best);
      done += tokenizer_->token_to_piece(best, false);
    }
    std::set<std::string> pieces;
    for (TokenId t : processor.allowed_tokens(history)) {
      pieces.insert(tokenizer_->is_end_of_generation(t) ? "<stop>" : tokenizer_->token_to_piece(t, false));
    }
    return pieces;
  };
  const std::string open = "Let me look [it up]. <tool_call>\n{\"name\": \"";
  EXPECT_TRUE(allowed_after("").count("[")) << "text before a call is free";
  EXPECT_TRUE(allowed_after("").count("<stop>"));
  const auto in_name = allowed_after(open + "get_");
  EXPECT_TRUE(in_name.count("w") && in_name.count("t"));
  EXPECT_FALSE(in_name.count("x")) << "only offered functions";
  const auto at_args = allowed_after(open + "get_weather\", \"arguments\": ");
  EXPECT_TRUE(at_args.count("{"));
  EXPECT_FALSE(at_args.count("[")) << "arguments follow the function's schema";
  EXPECT_FALSE(allowed_after(open + "get_weather\", \"arguments\": {").count("}")) << "city is required";
  const auto after = allowed_after(open + "get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
  EXPECT_TRUE(after.count("<stop>") && after.count("[")) << "free text again after the call";
}

// A grammar with nothing after "a" (an empty character class): the request ends with an error
// that says so; a request beside it in the batch is unaffected.
TEST_F(StructuredStories, ADeadEndEndsTheRequestWithAnError) {
  Constraint c;
  c.kind = ConstraintKind::Grammar;
  c.text = "root ::= \"a\" [^\\x00-\\U0010FFFF]";
  LLMEngine engine(*model_, stories_config(), tokenizer_->stop_token_ids());
  RequestSpec spec;
  spec.prompt = tokenizer_->encode("Once upon a time", true, false);
  spec.max_tokens = 50;
  spec.grammar = compiler_->compile(c);
  const RequestId dead = engine.add_request(spec);
  spec.grammar = compiler_->compile(choice_constraint());
  const RequestId fine = engine.add_request(spec);
  std::map<RequestId, RequestOutput> last;
  std::map<RequestId, std::vector<TokenId>> tokens;
  while (engine.has_unfinished()) {
    for (RequestOutput& out : engine.step()) {
      for (const SampleResult& s : out.new_tokens) tokens[out.id].push_back(s.token);
      last[out.id] = std::move(out);
    }
  }
  EXPECT_EQ(last[dead].finish_reason, FinishReason::Error) << tokenizer_->decode(tokens[dead], false);
  EXPECT_NE(last[dead].error.find("allows no token"), std::string::npos) << last[dead].error;
  EXPECT_EQ(last[fine].finish_reason, FinishReason::Stop);
  EXPECT_TRUE(choice_complete(tokenizer_->decode(tokens[fine], false)));
  EXPECT_EQ(engine.kv().num_free_blocks(), engine.kv().num_blocks());

  // With a draft model drafting through the same chain: its row at the dead end can only propose
  // the stop token, and the rows after that draft follow it without matching.
  const std::unique_ptr<Model> draft = q4_0_draft();
  EngineConfig speculating = stories_config();
  speculating.spec = draft_model_spec(draft.get());
  for (const float temperature : {0.0f, 0.8f}) {
    const GrammarRun run = run_grammar(*model_, *tokenizer_, spec.prompt, compiler_->compile(c), speculating, temperature, 50);
    EXPECT_EQ(run.finish, std::vector<FinishReason>(4, FinishReason::Error)) << "temperature " << temperature;
  }
}

TEST_F(StructuredStories, BadConstraintsAreClearErrors) {
  auto message = [&](ConstraintKind kind, const std::string& text) {
    Constraint c;
    c.kind = kind;
    c.text = text;
    try {
      compiler_->compile(c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(ConstraintKind::JsonSchema, "{\"type\": ").find("invalid json_schema"), std::string::npos);
  EXPECT_NE(message(ConstraintKind::JsonSchema, R"({"type": "frobnicate"})").find("invalid json_schema"), std::string::npos);
  EXPECT_NE(message(ConstraintKind::Regex, "([a-z]+").find("invalid regex"), std::string::npos);
  EXPECT_NE(message(ConstraintKind::Grammar, "root ::= (\"a\"").find("invalid grammar"), std::string::npos);
  EXPECT_NE(message(ConstraintKind::Grammar, "rot ::= \"a\"").find("invalid grammar"), std::string::npos);
  EXPECT_NE(message(ConstraintKind::Choice, "").find("at least one choice"), std::string::npos);
  // Keywords the grammar would not enforce are refused by name, also when the same schema comes
  // again (compiled grammars are cached), never silently dropped.
  for (int again = 0; again < 2; ++again) {
    EXPECT_NE(message(ConstraintKind::JsonSchema, R"({"type": "array", "items": {"type": "integer"}, "uniqueItems": true})")
                  .find("uniqueItems"),
              std::string::npos);
  }
  EXPECT_NE(message(ConstraintKind::JsonSchema, R"({"type": "object", "properties": {"a": {"type": "string", "nullable": true}}})")
                .find("keyword 'nullable' at /properties/a"),
            std::string::npos);
  EXPECT_NE(message(ConstraintKind::JsonSchema, R"({"type": "string", "format": "credit-card"})").find("format 'credit-card'"),
            std::string::npos);
  EXPECT_NE(message(ConstraintKind::JsonSchema, R"({"not": {"type": "string"}})").find("keyword 'not'"), std::string::npos);
  EXPECT_NE(message(ConstraintKind::JsonSchema, R"({"type": "number", "multipleOf": 0.5})").find("multipleOf"), std::string::npos);
  // Annotations, $defs/$ref, anyOf, enums, formats and patterns compile.
  EXPECT_EQ(message(ConstraintKind::JsonSchema, R"({"$schema": "https://json-schema.org/draft/2020-12/schema",
      "title": "Order", "description": "an order", "type": "object",
      "$defs": {"item": {"type": "object", "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}[0-9]{4}$"},
                                                         "qty": {"type": "integer", "minimum": 1}},
                         "required": ["sku", "qty"]}},
      "properties": {"id": {"type": "string", "format": "uuid"}, "when": {"type": "string", "format": "date-time"},
                     "items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "minItems": 1, "maxItems": 5},
                     "status": {"enum": ["new", "paid"]}, "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
      "required": ["id", "items"]})"),
            "no error");

  LLMEngine engine(*model_, stories_config(), tokenizer_->stop_token_ids());
  RequestSpec spec;
  spec.prompt = tokenizer_->encode("Once", true, false);
  spec.grammar = compiler_->compile(regex_constraint());
  spec.ignore_eos = true;
  EXPECT_THROW(engine.add_request(spec), Error);
}

}  // namespace
}  // namespace kestrel
