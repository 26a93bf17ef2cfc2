// The tool-calling surface without a model: request parsing (tools, tool_choice, the constraint a
// choice imposes, response_format / structured_outputs / guided_* and their conflicts) and the
// conversion of replies in the formats models write (Hermes/Qwen2.5 <tool_call> blocks, Llama 3
// JSON, Mistral [TOOL_CALLS]) into OpenAI tool_calls.
#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/structured_request.h"
#include "server/tool_calls.h"

namespace kestrel::server {
namespace {

using json = nlohmann::ordered_json;

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "get_time"}}])");

StructuredRequest tools_request(const json& choice = nullptr) {
  json body = {{"tools", kTools}};
  if (!choice.is_null()) body["tool_choice"] = choice;
  return parse_structured_request(body, true);
}

TEST(ToolRequest, ChoicesAndTheirConstraints) {
  StructuredRequest r = tools_request();
  EXPECT_EQ(r.tool_choice, ToolChoice::Auto);
  EXPECT_FALSE(r.constraint.has_value());
  ASSERT_EQ(r.tools.size(), 2u);
  EXPECT_EQ(r.tools[1].parameters, json::parse(R"({"type": "object", "properties": {}})"));

  r = tools_request({{"type", "function"}, {"function", {{"name", "get_weather"}}}});
  EXPECT_EQ(r.tool_choice, ToolChoice::Named);
  ASSERT_TRUE(r.constraint.has_value());
  EXPECT_EQ(r.constraint->kind, grammar::ConstraintKind::JsonSchema);
  EXPECT_EQ(json::parse(r.constraint->text), kTools[0]["function"]["parameters"]);

  r = tools_request("required");
  ASSERT_TRUE(r.constraint.has_value());
  const json schema = json::parse(r.constraint->text);
  EXPECT_EQ(schema["type"], "array");
  EXPECT_EQ(schema["minItems"], 1);
  EXPECT_EQ(schema["items"]["anyOf"].size(), 2u);
  EXPECT_EQ(schema["items"]["anyOf"][0]["properties"]["name"]["enum"][0], "get_weather");

  json body = {{"tools", kTools}, {"tool_choice", "required"}, {"parallel_tool_calls", false}};
  EXPECT_EQ(json::parse(parse_structured_request(body, true).constraint->text)["maxItems"], 1);
  EXPECT_FALSE(json::parse(r.constraint->text).contains("maxItems"));

  r = tools_request("none");
  EXPECT_EQ(r.tool_choice, ToolChoice::None);
  EXPECT_FALSE(r.constraint.has_value());
}

std::string error_param(const json& body, bool chat = true) {
  try {
    parse_structured_request(body, chat);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.param();
  }
  return "no error";
}

TEST(ToolRequest, BadFieldsAreNamed) {
  EXPECT_EQ(error_param({{"tool_choice", "auto"}}), "tool_choice");
  EXPECT_EQ(error_param({{"tools", kTools}, {"tool_choice", "sometimes"}}), "tool_choice");
  EXPECT_EQ(error_param({{"tools", kTools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "x"}}}}}}), "tool_choice");
  EXPECT_EQ(error_param({{"tools", json::array({{{"type", "function"}, {"function", {{"name", "bad name"}}}}})}}), "tools");
  EXPECT_EQ(error_param({{"tools", json::array({{{"type", "code"}}})}}), "tools");
  EXPECT_EQ(error_param({{"tools", kTools}}, /*chat=*/false), "tools");
  EXPECT_EQ(error_param({{"tools", kTools}, {"tool_choice", "required"}, {"response_format", {{"type", "json_object"}}}}),
            "tool_choice");
  EXPECT_EQ(error_param({{"guided_regex", "a"}, {"guided_choice", json::array({"b"})}}), "guided_choice");
  EXPECT_EQ(error_param({{"structured_outputs", {{"json", 5}}}}), "structured_outputs");
  EXPECT_EQ(error_param({{"structured_outputs", json::object()}}), "structured_outputs");
  EXPECT_EQ(error_param({{"response_format", {{"type", "json_schema"}}}}), "response_format");
  EXPECT_EQ(error_param({{"guided_decoding_backend", "outlines"}, {"guided_regex", "a"}}), "guided_decoding_backend");
}

TEST(StructuredRequestParsing, EachSourceGivesItsConstraint) {
  auto constraint = [](const json& body) { return *parse_structured_request(body, true).constraint; };
  EXPECT_EQ(constraint({{"response_format", {{"type", "json_object"}}}}).kind, grammar::ConstraintKind::JsonObject);
  const auto schema = constraint({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "p"}, {"schema", {{"type", "integer"}}}}}}}});
  EXPECT_EQ(schema.kind, grammar::ConstraintKind::JsonSchema);
  EXPECT_EQ(json::parse(schema.text), json({{"type", "integer"}}));
  // A schema given as a string (vLLM accepts both).
  EXPECT_EQ(json::parse(constraint({{"guided_json", R"({"type": "string"})"}}).text), json({{"type", "string"}}));
  const StructuredRequest with_choice =
      parse_structured_request({{"structured_outputs", {{"choice", json::array({"a", "b"})}, {"disable_any_whitespace", true}}}}, true);
  EXPECT_EQ(with_choice.constraint->kind, grammar::ConstraintKind::Choice);
  EXPECT_EQ(with_choice.constraint->choices, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(with_choice.any_whitespace, false);
  EXPECT_FALSE(tools_request().any_whitespace.has_value());
  EXPECT_EQ(constraint({{"guided_grammar", "root ::= \"x\""}}).kind, grammar::ConstraintKind::Grammar);
  EXPECT_EQ(constraint({{"structured_outputs", {{"regex", "x+"}}}}).text, "x+");
  EXPECT_FALSE(parse_structured_request({{"response_format", {{"type", "text"}}}}, true).constraint.has_value());
}

TEST(ToolReplies, NamedAndRequiredChoices) {
  ToolCallReply r = extract_tool_calls(tools_request({{"type", "function"}, {"function", {{"name", "get_weather"}}}}),
                                       R"({"city": "Paris"})", FinishReason::Stop);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_FALSE(r.content.has_value());
  EXPECT_EQ(r.tool_calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(nlohmann::json::parse(r.tool_calls[0]["function"]["arguments"].get<std::string>())["city"], "Paris");
  EXPECT_EQ(r.tool_calls[0]["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(r.finish_reason, "stop");

  r = extract_tool_calls(tools_request("required"),
                         R"([{"name": "get_time", "parameters": {}}, {"name": "get_weather", "parameters": {"city": "Oslo"}}])",
                         FinishReason::Stop);
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[1]["function"]["arguments"], R"({"city":"Oslo"})");
  EXPECT_EQ(r.finish_reason, "tool_calls");
  EXPECT_NE(r.tool_calls[0]["id"], r.tool_calls[1]["id"]);

  // Cut by the length limit: the partial text is content, not a broken call.
  r = extract_tool_calls(tools_request("required"), R"([{"name": "get_ti)", FinishReason::Length);
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(r.content, R"([{"name": "get_ti)");
  EXPECT_EQ(r.finish_reason, "length");
}

TEST(ToolReplies, AutoRecognisesTheModelsFormats) {
  const StructuredRequest request = tools_request();
  // Hermes / Qwen2.5, with text around the block and two calls.
  ToolCallReply r = extract_tool_calls(request,
                                       "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n"
                                       "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
                                       FinishReason::Stop);
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.content, "Let me check.");
  EXPECT_EQ(r.tool_calls[0]["function"]["arguments"], R"({"city":"Rome"})");
  EXPECT_EQ(r.finish_reason, "tool_calls");
  // Llama 3.x: the reply is one JSON object with "parameters".
  r = extract_tool_calls(request, R"( {"name": "get_weather", "parameters": {"city": "Lima"}} )", FinishReason::Stop);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_FALSE(r.content.has_value());
  // A reply of only a ```json block (Qwen2.5-Coder's habit), and of a block with text around it (content).
  r = extract_tool_calls(request, "```json\n{\"name\": \"get_time\", \"arguments\": {}}\n```", FinishReason::Stop);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_FALSE(r.content.has_value());
  const std::string fenced_in_text = "Call it like this:\n```json\n{\"name\": \"get_time\", \"arguments\": {}}\n```";
  r = extract_tool_calls(request, fenced_in_text, FinishReason::Stop);
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(r.content, fenced_in_text);
  // Mistral.
  r = extract_tool_calls(request, R"([TOOL_CALLS] [{"name": "get_time", "arguments": {}}])", FinishReason::Stop);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0]["function"]["name"], "get_time");
  // Not calls: plain text, a function that was not offered, malformed JSON.
  for (const std::string text : {"It is sunny.", R"({"name": "rm_rf", "arguments": {}})",
                                 "<tool_call>{\"name\": \"get_time\", </tool_call>"}) {
    r = extract_tool_calls(request, text, FinishReason::Stop);
    EXPECT_TRUE(r.tool_calls.empty()) << text;
    EXPECT_EQ(r.content, text);
    EXPECT_EQ(r.finish_reason, "stop");
  }
}

// Gemma's Python-style calls: the expected arguments are what Python's ast.literal_eval gives for
// each literal, written out as JSON by hand.
TEST(ToolReplies, AutoRecognisesGemmaToolCode) {
  const StructuredRequest request = tools_request();
  ToolCallReply r = extract_tool_calls(
      request, "I'll look it up.\n```tool_code\nget_weather(city='Paris, \"FR\"', days=3, opts={'units': 'C', 'x': [1, -2.5e3, (True, None)]})\n```",
      FinishReason::Stop);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(r.tool_calls[0]["function"]["arguments"].get<std::string>()),
            json::parse(R"({"city": "Paris, \"FR\"", "days": 3, "opts": {"units": "C", "x": [1, -2500.0, [true, null]]}})"));
  EXPECT_EQ(r.content, "I'll look it up.");
  EXPECT_EQ(r.finish_reason, "tool_calls");
  // Positional arguments take the schema's parameter names; a module prefix is dropped; two calls.
  r = extract_tool_calls(request, "```tool_code\ndefault_api.get_weather(\"Oslo\")\nget_time()\n```", FinishReason::Stop);
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(json::parse(r.tool_calls[0]["function"]["arguments"].get<std::string>()), json::parse(R"({"city": "Oslo"})"));
  EXPECT_EQ(r.tool_calls[1]["function"]["name"], "get_time");
  EXPECT_FALSE(r.content.has_value());
  // A reply that is only a call, without the fence.
  r = extract_tool_calls(request, "get_weather(city=\"Rome\")", FinishReason::Stop);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  // Not calls: an unknown function, an expression, a variable, too many positional arguments,
  // a keyword given twice, a positional after a keyword.
  for (const std::string text : {"```tool_code\nrm_rf('/')\n```", "get_weather(city=1 + 2)", "get_weather(city=x)",
                                 "get_weather('a', 'b')", "get_weather(city='a', city='b')", "get_weather(city='a', 3)",
                                 "print(get_weather('a'))"}) {
    r = extract_tool_calls(request, text, FinishReason::Stop);
    EXPECT_TRUE(r.tool_calls.empty()) << text;
    EXPECT_EQ(r.content, text);
  }
}

// Calls read from unconstrained text are checked against their function's schema when the server
// can check (arguments_match): one that does not match makes the reply content, as text that is
// not a call is.
TEST(ToolReplies, AutoCallsWhoseArgumentsDoNotMatchAreContent) {
  StructuredRequest request = tools_request();
  std::vector<std::string> checked;
  request.arguments_match = [&](const ToolFunction& f, const std::string& arguments) {
    checked.push_back(f.name + " " + arguments);
    return json::parse(arguments).value("city", "") != "Atlantis";
  };
  for (const std::string city : {"Paris", "Atlantis"}) {
    const bool valid = city != "Atlantis";
    for (const std::string text : {"<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"" + city + "\"}}</tool_call>",
                                   "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"" + city + "\"}}",
                                   "```tool_code\nget_weather(city='" + city + "')\n```"}) {
      checked.clear();
      const ToolCallReply r = extract_tool_calls(request, text, FinishReason::Stop);
      EXPECT_EQ(r.tool_calls.size(), valid ? 1u : 0u) << text;
      EXPECT_EQ(r.finish_reason, valid ? "tool_calls" : "stop");
      if (!valid) EXPECT_EQ(r.content, text);
      ASSERT_EQ(checked.size(), 1u) << text;
      EXPECT_EQ(checked[0], "get_weather {\"city\":\"" + city + "\"}");
    }
  }
}

TEST(ToolReplies, RequiredPropertiesAreCheckedInNestedObjects) {
  const json schema = json::parse(R"({"type": "object", "required": ["a"], "properties": {
      "a": {"type": "object", "required": ["b"], "properties": {"b": {"type": "integer"}}},
      "list": {"type": "array", "items": {"type": "object", "required": ["id"]}}}})");
  EXPECT_TRUE(required_present(schema, nlohmann::json::parse(R"({"a": {"b": 1}, "list": [{"id": 1}, {"id": 2, "x": 0}]})")));
  EXPECT_FALSE(required_present(schema, nlohmann::json::parse(R"({"list": []})")));
  EXPECT_FALSE(required_present(schema, nlohmann::json::parse(R"({"a": {}})")));
  EXPECT_FALSE(required_present(schema, nlohmann::json::parse(R"({"a": {"b": 1}, "list": [{"id": 1}, {"x": 0}]})")));
}

}  // namespace
}  // namespace kestrel::server
