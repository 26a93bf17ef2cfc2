// The structured-output and tool-calling fields of an OpenAI / vLLM request body:
//   response_format {type: text | json_object | json_schema {name, schema, strict}};
//   vLLM's structured_outputs {json | regex | choice | grammar | json_object, disable_any_whitespace}
//   and its older guided_json / guided_regex / guided_choice / guided_grammar fields;
//   tools [{type: function, function: {name, description, parameters}}] with tool_choice
//   none | auto | required | {type: function, function: {name}} (chat only).
// At most one of them may constrain the output (a 400 names the conflict). A named tool choice is
// constrained to the function's parameters schema, `required` to a non-empty JSON list of
// {name, parameters} calls (as vLLM does); `auto` leaves the model free and parses its output.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/constraint.h"

namespace kestrel::server {

enum class ToolChoice { None, Auto, Required, Named };

struct ToolFunction {
  std::string name;
  nlohmann::ordered_json parameters;  // a JSON Schema (an empty-object schema when not given)
};

struct StructuredRequest {
  std::optional<grammar::Constraint> constraint;
  std::string constraint_param;  // the request field the constraint came from (for errors)
  // structured_outputs.disable_any_whitespace when given (else the server's default applies).
  std::optional<bool> any_whitespace;
  std::vector<ToolFunction> tools;
  ToolChoice tool_choice = ToolChoice::None;
  std::string named_tool;  // ToolChoice::Named
  bool parallel_tool_calls = true;  // false: at most one call (`required` lists exactly one)
  // `auto` under hermes_tool_calls_constraint (the chat template writes `<tool_call>`).
  bool hermes_tool_calls = false;
  // Whether `arguments` match the function's parameters schema, for calls read from text no
  // grammar constrained (set by the server; null: not checked). A call that does not match is
  // not a call: the reply is content.
  std::function<bool(const ToolFunction& function, const std::string& arguments)> arguments_match;
};

// Throws ApiError(400) naming the field for anything malformed, conflicting or unsupported.
StructuredRequest parse_structured_request(const nlohmann::ordered_json& body, bool chat);

// Whether `value` has every property `schema` requires, in nested objects too (following
// "properties" and "items"; $ref and anyOf branches are not followed). xgrammar's any-order JSON
// grammar, which checks a tool call's arguments otherwise, does not enforce `required`.
bool required_present(const nlohmann::ordered_json& schema, const nlohmann::json& value);

// `tool_choice: auto` for models that call tools in Hermes/Qwen 2.5 form (their chat template
// writes `<tool_call>`): text stays free, but once the model opens `<tool_call>` the call must be
// {"name": <an offered function>, "arguments": <its parameters schema>} and close with
// `</tool_call>` (an xgrammar structural tag with that trigger).
grammar::Constraint hermes_tool_calls_constraint(const std::vector<ToolFunction>& tools);

}  // namespace kestrel::server
