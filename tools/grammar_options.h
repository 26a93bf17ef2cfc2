// Structured-output options of `run` and `batch` (llama.cpp's names): --grammar GBNF|FILE,
// --grammar-file FILE, -j/--json-schema SCHEMA|FILE, --json-schema-file FILE, plus --regex R and
// --json (any JSON object). A --grammar or --json-schema argument that names a file is read.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "grammar/grammar_compiler.h"

namespace kestrel::cli {

struct GrammarOptions {
  std::string grammar, grammar_file, json_schema, json_schema_file, regex;
  bool json = false;
};

void add_grammar_options(CLI::App& cmd, GrammarOptions& o);
// The constraint the options ask for (nullopt: none); at most one may be given (else an error).
std::optional<grammar::Constraint> make_constraint(const GrammarOptions& o);

}  // namespace kestrel::cli
