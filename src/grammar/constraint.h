// What a request's output must match (structured output): JSON (any object, or a JSON Schema), a
// regular expression, one of a list of strings, or a context-free grammar (GBNF/EBNF, or Lark).
// Plain data: the server and the CLI fill it in, grammar_compiler.h turns it into token masks.
#pragma once

#include <string>
#include <vector>

namespace kestrel::grammar {

enum class ConstraintKind {
  JsonObject,  // any JSON object (OpenAI's response_format {"type": "json_object"})
  JsonSchema,  // `text` is a JSON Schema document
  Regex,       // `text` is a regular expression the whole output matches
  Choice,      // the output is exactly one of `choices`
  Grammar,     // `text` is a grammar: GBNF/EBNF (rules written `name ::= ...`, root rule `root`)
               // or, without any `::=`, Lark (as vLLM tells them apart)
  StructuralTag,  // `text` is an xgrammar structural tag ({"type": "structural_tag", "format": ...}),
                  // e.g. free text with tool calls constrained once their opening tag appears
};

struct Constraint {
  ConstraintKind kind = ConstraintKind::JsonObject;
  std::string text;
  std::vector<std::string> choices;
  // JSON: whitespace between tokens as the model likes (true), at most `max_whitespace` characters
  // in a row (as llama.cpp's JSON grammars bound it: small models otherwise ramble in blanks and
  // newlines); or none beyond one space after ',' and ':' (false: xgrammar's compact form).
  bool any_whitespace = true;
  int max_whitespace = 20;  // <= 0: unbounded
  // JSON Schema: properties not listed are refused unless the schema allows them explicitly
  // (OpenAI's strict mode and xgrammar's default); false follows the JSON Schema default.
  bool strict = true;
  // JSON Schema: an object's properties in any order (to check a document, e.g. a tool call's
  // re-serialised arguments); false: in the schema's order, as generation follows it.
  bool any_order = false;
};

// A short description for logs and errors, e.g. "json_schema" or "regex".
const char* constraint_kind_name(ConstraintKind kind);

}  // namespace kestrel::grammar
