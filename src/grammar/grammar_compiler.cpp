#include "grammar/grammar_compiler.h"

#include <fmt/format.h>

#include <exception>

#include <kestrel_log.h>

#include "core/error.h"
#include "grammar/compiled_grammar.h"
#include "grammar/json_schema_check.h"

namespace kestrel::grammar {

const char* constraint_kind_name(ConstraintKind kind) {
  switch (kind) {
    case ConstraintKind::JsonObject: return "json_object";
    case ConstraintKind::JsonSchema: return "json_schema";
    case ConstraintKind::Regex: return "regex";
    case ConstraintKind::Choice: return "choice";
    case ConstraintKind::Grammar: return "grammar";
    case ConstraintKind::StructuralTag: return "structural_tag";
  }
  return "?";
}

namespace {

// xgrammar's vocabulary: each token's bytes. Tokens without text (control tokens, unused ids,
// the model's padding ids past the tokenizer) are "special": never allowed by a grammar.
xgrammar::TokenizerInfo tokenizer_info(const Tokenizer& tokenizer, int32_t n_vocab, const std::vector<TokenId>& stop_tokens) {
  if (n_vocab < tokenizer.vocab_size()) {
    fail("the model's vocabulary ({} logits) is smaller than its tokenizer's ({} tokens)", n_vocab, tokenizer.vocab_size());
  }
  std::vector<std::string> pieces(size_t(tokenizer.vocab_size()));
  for (TokenId id = 0; id < tokenizer.vocab_size(); ++id) pieces[size_t(id)] = tokenizer.token_to_piece(id, false);
  std::vector<int32_t> stops(stop_tokens.begin(), stop_tokens.end());
  return xgrammar::TokenizerInfo(pieces, xgrammar::VocabType::RAW, n_vocab, stops, false);
}

// One line of an xgrammar error, without the "[hh:mm:ss] path/file.cc:line: " prefixes it puts in
// front of its messages (also of nested ones).
std::string first_line(const char* what) {
  std::string s(what);
  if (const size_t nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
  for (size_t open = s.find('['); open != std::string::npos; open = s.find('[', open + 1)) {
    if (open + 10 >= s.size() || s[open + 3] != ':' || s[open + 6] != ':' || s[open + 9] != ']') continue;
    const size_t source = s.find(".cc:", open);
    const size_t colon = source == std::string::npos ? source : s.find(": ", source);
    if (colon == std::string::npos) break;
    s.erase(open, colon + 2 - open);
  }
  return s;
}

// Runs `convert` (a constraint -> grammar conversion, which xgrammar does not cache) with this
// thread's xgrammar warnings collected: each one is a part of the constraint the grammar would
// ignore, so the first becomes the error.
template <typename Convert>
void refuse_ignored_parts(Convert convert) {
  std::vector<std::string> warnings;
  std::vector<std::string>* previous = kestrel_xgrammar::set_thread_warning_sink(&warnings);
  try {
    convert();
  } catch (...) {
    kestrel_xgrammar::set_thread_warning_sink(previous);
    throw;
  }
  kestrel_xgrammar::set_thread_warning_sink(previous);
  if (!warnings.empty()) fail("{} (refused: the grammar would not enforce it)", warnings.front());
}

}  // namespace

std::string choice_grammar(const std::vector<std::string>& choices) {
  if (choices.empty()) fail("a choice constraint needs at least one choice");
  std::string out = "root ::= ";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (choices[i].empty()) fail("choice {} is the empty string", i);
    if (i > 0) out += " | ";
    out += '"';
    for (const unsigned char c : choices[i]) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += char(c);
      } else if (c < 0x20 || c == 0x7f) {
        out += fmt::format("\\x{:02x}", c);
      } else {
        out += char(c);  // UTF-8 passes through: a literal is a sequence of code points
      }
    }
    out += '"';
  }
  return out;
}

struct GrammarCompiler::Impl {
  Impl(xgrammar::TokenizerInfo info, int max_threads) : compiler(info, max_threads, /*cache_enabled=*/true) {}
  xgrammar::GrammarCompiler compiler;
};

GrammarCompiler::GrammarCompiler(const Tokenizer& tokenizer, int32_t n_vocab, std::vector<TokenId> stop_tokens,
                                 int max_threads)
    : impl_(std::make_unique<Impl>(tokenizer_info(tokenizer, n_vocab, stop_tokens), std::max(1, max_threads))),
      n_vocab_(n_vocab) {}

GrammarCompiler::~GrammarCompiler() = default;

std::shared_ptr<const CompiledGrammar> GrammarCompiler::compile(const Constraint& c) const {
  xgrammar::GrammarCompiler& compiler = impl_->compiler;
  const std::optional<int> whitespace = c.any_whitespace && c.max_whitespace > 0 ? std::optional<int>(c.max_whitespace) : std::nullopt;
  try {
    switch (c.kind) {
      case ConstraintKind::JsonObject:
        // Any object (xgrammar's built-in JSON grammar would also allow arrays and scalars).
        return std::make_shared<CompiledGrammar>(
            compiler.CompileJSONSchema(R"({"type": "object"})", c.any_whitespace, std::nullopt, std::nullopt,
                                       /*strict_mode=*/false, whitespace),
            c.kind, n_vocab_);
      case ConstraintKind::JsonSchema: {
        const nlohmann::json schema = nlohmann::json::parse(c.text, nullptr, /*allow_exceptions=*/false);
        if (schema.is_discarded()) fail("the schema is not valid JSON");
        if (const std::string why = unsupported_schema_feature(schema); !why.empty()) fail("{}", why);
        refuse_ignored_parts([&] {
          xgrammar::Grammar::FromJSONSchema(c.text, c.any_whitespace, std::nullopt, std::nullopt, c.strict, whitespace,
                                            /*print_converted_ebnf=*/false, c.any_order);
        });
        return std::make_shared<CompiledGrammar>(
            compiler.CompileJSONSchema(c.text, c.any_whitespace, std::nullopt, std::nullopt, c.strict, whitespace,
                                       c.any_order),
            c.kind, n_vocab_);
      }
      case ConstraintKind::Regex:
        refuse_ignored_parts([&] { xgrammar::Grammar::FromRegex(c.text); });
        return std::make_shared<CompiledGrammar>(compiler.CompileRegex(c.text), c.kind, n_vocab_);
      case ConstraintKind::Choice:
        return std::make_shared<CompiledGrammar>(compiler.CompileGrammar(choice_grammar(c.choices)), c.kind, n_vocab_);
      case ConstraintKind::Grammar:
        if (c.text.find("::=") != std::string::npos) {
          refuse_ignored_parts([&] { xgrammar::Grammar::FromEBNF(c.text); });
          return std::make_shared<CompiledGrammar>(compiler.CompileGrammar(c.text), c.kind, n_vocab_);
        }
        refuse_ignored_parts([&] { xgrammar::Grammar::FromLark(c.text); });
        return std::make_shared<CompiledGrammar>(compiler.CompileLark(c.text), c.kind, n_vocab_);
      case ConstraintKind::StructuralTag:
        refuse_ignored_parts([&] {
          const auto grammar = xgrammar::Grammar::FromStructuralTag(c.text);
          if (const auto* error = std::get_if<xgrammar::StructuralTagError>(&grammar)) {
            fail("{}", std::visit([](const auto& e) { return std::string(e.what()); }, *error));
          }
        });
        return std::make_shared<CompiledGrammar>(compiler.CompileStructuralTag(c.text), c.kind, n_vocab_);
    }
  } catch (const Error& e) {
    fail("invalid {}: {}", constraint_kind_name(c.kind), e.what());
  } catch (const std::exception& e) {
    fail("invalid {}: {}", constraint_kind_name(c.kind), first_line(e.what()));
  }
  fail("internal: unknown constraint kind");
}

}  // namespace kestrel::grammar
