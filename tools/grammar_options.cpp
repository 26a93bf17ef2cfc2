#include "grammar_options.h"

#include <filesystem>

#include "cli_checks.h"
#include "core/error.h"

namespace kestrel::cli {
namespace {

// The and llama.cpp's spellings both work: `--json-schema FILE` and `--json-schema '{...}'`.
std::string text_or_file(const std::string& arg, const char* option) {
  std::error_code ec;
  return std::filesystem::is_regular_file(arg, ec) ? read_input_file(arg, option) : arg;
}

}  // namespace

void add_grammar_options(CLI::App& cmd, GrammarOptions& o) {
  cmd.add_option("--grammar", o.grammar, "constrain the output to a GBNF grammar (root rule 'root') or a Lark grammar, given inline or as a file");
  cmd.add_option("--grammar-file", o.grammar_file, "... read from a file")->check(existing_file());
  cmd.add_option("-j,--json-schema", o.json_schema, "constrain the output to JSON matching this JSON Schema, given inline or as a file");
  cmd.add_option("--json-schema-file", o.json_schema_file, "... read from a file")->check(existing_file());
  cmd.add_option("--regex", o.regex, "constrain the output to match this regular expression");
  cmd.add_flag("--json", o.json, "constrain the output to a JSON object");
}

std::optional<grammar::Constraint> make_constraint(const GrammarOptions& o) {
  std::optional<grammar::Constraint> c;
  int given = 0;
  auto set = [&](grammar::ConstraintKind kind, std::string text) {
    ++given;
    c = grammar::Constraint{};
    c->kind = kind;
    c->text = std::move(text);
  };
  if (!o.grammar.empty()) set(grammar::ConstraintKind::Grammar, text_or_file(o.grammar, "--grammar"));
  if (!o.grammar_file.empty()) set(grammar::ConstraintKind::Grammar, read_input_file(o.grammar_file, "--grammar-file"));
  if (!o.json_schema.empty()) set(grammar::ConstraintKind::JsonSchema, text_or_file(o.json_schema, "--json-schema"));
  if (!o.json_schema_file.empty()) set(grammar::ConstraintKind::JsonSchema, read_input_file(o.json_schema_file, "--json-schema-file"));
  if (!o.regex.empty()) set(grammar::ConstraintKind::Regex, o.regex);
  if (o.json) set(grammar::ConstraintKind::JsonObject, "");
  if (given > 1) fail("give at most one of --grammar, --grammar-file, --json-schema, --json-schema-file, --regex, --json");
  return c;
}

}  // namespace kestrel::cli
