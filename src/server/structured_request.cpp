#include "server/structured_request.h"

#include <fmt/format.h>

#include <set>

#include "server/request_fields.h"

namespace kestrel::server {
namespace {

using json = nlohmann::ordered_json;
using grammar::Constraint;
using grammar::ConstraintKind;

// A schema given as an object or as a JSON string (vLLM accepts both).
std::string schema_text(const json& value, const std::string& param) {
  if (value.is_object() || value.is_boolean()) return value.dump();
  if (value.is_string()) {
    const json parsed = json::parse(value.get<std::string>(), nullptr, false);
    if (parsed.is_discarded() || !(parsed.is_object() || parsed.is_boolean())) {
      bad(param, fmt::format("'{}' must be a JSON Schema (an object, or a string holding one)", param));
    }
    return parsed.dump();
  }
  bad(param, fmt::format("'{}' must be a JSON Schema object", param));
}

std::string string_field(const json& value, const std::string& param) {
  if (!value.is_string() || value.get<std::string>().empty()) bad(param, fmt::format("'{}' must be a non-empty string", param));
  return value.get<std::string>();
}

std::vector<std::string> choices(const json& value, const std::string& param) {
  if (!value.is_array() || value.empty()) bad(param, fmt::format("'{}' must be a non-empty list of strings", param));
  std::vector<std::string> out;
  for (const json& c : value) {
    if (!c.is_string() || c.get<std::string>().empty()) bad(param, fmt::format("'{}' must hold non-empty strings", param));
    out.push_back(c.get<std::string>());
  }
  return out;
}

Constraint make(ConstraintKind kind, std::string text = "") {
  Constraint c;
  c.kind = kind;
  c.text = std::move(text);
  return c;
}

// Records one constraint; a second one from another field is a conflict.
void set_constraint(StructuredRequest& r, Constraint c, const std::string& param) {
  if (r.constraint) {
    bad(param, fmt::format("'{}' and '{}' both constrain the output; give only one", r.constraint_param, param));
  }
  r.constraint = std::move(c);
  r.constraint_param = param;
}

void parse_response_format(const json& body, StructuredRequest& r) {
  const json* rf = field(body, "response_format");
  if (rf == nullptr) return;
  if (!rf->is_object()) bad("response_format", "'response_format' must be an object");
  const json* type = field(*rf, "type");
  if (type == nullptr || !type->is_string()) bad("response_format", "'response_format.type' must be a string");
  const std::string t = type->get<std::string>();
  if (t == "text") return;
  if (t == "json_object") {
    set_constraint(r, make(ConstraintKind::JsonObject), "response_format");
    return;
  }
  if (t != "json_schema") {
    bad("response_format", fmt::format("'response_format.type' must be text, json_object or json_schema, got '{}'", t));
  }
  const json* spec = field(*rf, "json_schema");
  if (spec == nullptr || !spec->is_object()) bad("response_format", "'response_format.json_schema' must be an object");
  if (const json* name = field(*spec, "name"); name != nullptr && !name->is_string()) {
    bad("response_format", "'response_format.json_schema.name' must be a string");
  }
  if (const json* strict = field(*spec, "strict"); strict != nullptr && !strict->is_boolean()) {
    bad("response_format", "'response_format.json_schema.strict' must be true or false");
  }
  const json* schema = field(*spec, "schema");
  set_constraint(r, schema == nullptr ? make(ConstraintKind::JsonObject)
                                      : make(ConstraintKind::JsonSchema, schema_text(*schema, "response_format")),
                 "response_format");
}

void parse_structured_outputs(const json& body, StructuredRequest& r) {
  const json* so = field(body, "structured_outputs");
  if (so == nullptr) return;
  if (!so->is_object()) bad("structured_outputs", "'structured_outputs' must be an object");
  static const std::set<std::string> known = {"json", "regex", "choice", "grammar", "json_object", "disable_any_whitespace",
                                              "disable_fallback", "disable_additional_properties", "whitespace_pattern"};
  for (const auto& [key, value] : so->items()) {
    if (!known.count(key)) bad("structured_outputs", fmt::format("'structured_outputs.{}' is not supported", key));
  }
  if (field(*so, "whitespace_pattern") != nullptr) {
    bad("structured_outputs", "'structured_outputs.whitespace_pattern' is not supported (use disable_any_whitespace)");
  }
  std::optional<Constraint> c;
  int given = 0;
  if (const json* v = field(*so, "json")) c = make(ConstraintKind::JsonSchema, schema_text(*v, "structured_outputs")), ++given;
  if (const json* v = field(*so, "regex")) c = make(ConstraintKind::Regex, string_field(*v, "structured_outputs")), ++given;
  if (const json* v = field(*so, "choice")) {
    c = make(ConstraintKind::Choice);
    c->choices = choices(*v, "structured_outputs");
    ++given;
  }
  if (const json* v = field(*so, "grammar")) c = make(ConstraintKind::Grammar, string_field(*v, "structured_outputs")), ++given;
  if (const json* v = field(*so, "json_object")) {
    if (!v->is_boolean()) bad("structured_outputs", "'structured_outputs.json_object' must be true or false");
    if (v->get<bool>()) c = make(ConstraintKind::JsonObject), ++given;
  }
  if (given != 1) bad("structured_outputs", "'structured_outputs' needs exactly one of json, regex, choice, grammar, json_object");
  if (const json* v = field(*so, "disable_any_whitespace")) {
    if (!v->is_boolean()) bad("structured_outputs", "'structured_outputs.disable_any_whitespace' must be true or false");
    r.any_whitespace = !v->get<bool>();
  }
  set_constraint(r, std::move(*c), "structured_outputs");
}

void parse_guided(const json& body, StructuredRequest& r) {
  if (const json* v = field(body, "guided_json")) set_constraint(r, make(ConstraintKind::JsonSchema, schema_text(*v, "guided_json")), "guided_json");
  if (const json* v = field(body, "guided_regex")) set_constraint(r, make(ConstraintKind::Regex, string_field(*v, "guided_regex")), "guided_regex");
  if (const json* v = field(body, "guided_choice")) {
    Constraint c = make(ConstraintKind::Choice);
    c.choices = choices(*v, "guided_choice");
    set_constraint(r, std::move(c), "guided_choice");
  }
  if (const json* v = field(body, "guided_grammar")) set_constraint(r, make(ConstraintKind::Grammar, string_field(*v, "guided_grammar")), "guided_grammar");
  if (field(body, "guided_whitespace_pattern") != nullptr) {
    bad("guided_whitespace_pattern", "'guided_whitespace_pattern' is not supported");
  }
  if (const json* v = field(body, "guided_decoding_backend")) {
    if (!v->is_string() || (v->get<std::string>() != "xgrammar" && v->get<std::string>() != "auto")) {
      bad("guided_decoding_backend", "'guided_decoding_backend' must be \"xgrammar\" or \"auto\" (Kestrel's grammar engine)");
    }
  }
}

void parse_tools(const json& body, bool chat, StructuredRequest& r) {
  const json* tools = field(body, "tools");
  const json* choice = field(body, "tool_choice");
  if (!chat && (tools != nullptr || choice != nullptr)) bad(tools ? "tools" : "tool_choice", "tools are only supported on /v1/chat/completions");
  if (tools == nullptr) {
    if (choice != nullptr && !(choice->is_string() && choice->get<std::string>() == "none")) {
      bad("tool_choice", "'tool_choice' needs 'tools'");
    }
    return;
  }
  if (!tools->is_array()) bad("tools", "'tools' must be a list");
  std::set<std::string> names;
  for (const json& tool : *tools) {
    if (!tool.is_object() || tool.value("type", "") != "function") bad("tools", "each tool must be {\"type\": \"function\", \"function\": {...}}");
    const json* fn = field(tool, "function");
    if (fn == nullptr || !fn->is_object()) bad("tools", "each tool needs a 'function' object");
    const json* name = field(*fn, "name");
    if (name == nullptr || !name->is_string() || name->get<std::string>().empty() || name->get<std::string>().size() > 64) {
      bad("tools", "each function needs a 'name' of 1 to 64 characters");
    }
    ToolFunction f;
    f.name = name->get<std::string>();
    for (const char ch : f.name) {
      if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-')) {
        bad("tools", fmt::format("function name '{}' may only hold letters, digits, '_' and '-'", f.name));
      }
    }
    if (!names.insert(f.name).second) bad("tools", fmt::format("function '{}' is defined twice", f.name));
    const json* params = field(*fn, "parameters");
    if (params != nullptr && !params->is_object()) bad("tools", fmt::format("the parameters of '{}' must be a JSON Schema object", f.name));
    f.parameters = params != nullptr ? *params : json{{"type", "object"}, {"properties", json::object()}};
    r.tools.push_back(std::move(f));
  }
  r.tool_choice = r.tools.empty() ? ToolChoice::None : ToolChoice::Auto;
  r.parallel_tool_calls = boolean(body, "parallel_tool_calls", true);
  if (choice == nullptr) return;
  if (choice->is_string()) {
    const std::string c = choice->get<std::string>();
    if (c == "none") r.tool_choice = ToolChoice::None;
    else if (c == "auto") r.tool_choice = ToolChoice::Auto;
    else if (c == "required") r.tool_choice = ToolChoice::Required;
    else bad("tool_choice", fmt::format("'tool_choice' must be none, auto, required or a function, got '{}'", c));
  } else if (choice->is_object() && choice->value("type", "") == "function" && choice->contains("function") &&
             (*choice)["function"].is_object() && (*choice)["function"].contains("name") &&
             (*choice)["function"]["name"].is_string()) {
    r.named_tool = (*choice)["function"]["name"].get<std::string>();
    if (!names.count(r.named_tool)) bad("tool_choice", fmt::format("'tool_choice' names '{}', which is not in 'tools'", r.named_tool));
    r.tool_choice = ToolChoice::Named;
  } else {
    bad("tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
  }
  if ((r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named) && r.tools.empty()) {
    bad("tool_choice", "'tool_choice' needs at least one tool");
  }
}

// The constraint a tool choice imposes: a named function's arguments, or (required) a non-empty
// list of calls [{"name": ..., "parameters": {...}}] as vLLM's required tool choice.
std::optional<Constraint> tool_constraint(const StructuredRequest& r) {
  if (r.tool_choice == ToolChoice::Named) {
    for (const ToolFunction& f : r.tools) {
      if (f.name == r.named_tool) return make(ConstraintKind::JsonSchema, f.parameters.dump());
    }
  }
  if (r.tool_choice == ToolChoice::Required) {
    json any_of = json::array();
    for (const ToolFunction& f : r.tools) {
      any_of.push_back({{"type", "object"},
                        {"properties", {{"name", {{"type", "string"}, {"enum", json::array({f.name})}}}, {"parameters", f.parameters}}},
                        {"required", json::array({"name", "parameters"})}});
    }
    json schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", any_of}}}};
    if (!r.parallel_tool_calls) schema["maxItems"] = 1;
    return make(ConstraintKind::JsonSchema, schema.dump());
  }
  return std::nullopt;
}

}  // namespace

grammar::Constraint hermes_tool_calls_constraint(const std::vector<ToolFunction>& tools) {
  json tags = json::array();
  for (const ToolFunction& f : tools) {
    tags.push_back({{"type", "tag"},
                    {"begin", "<tool_call>\n{\"name\": " + json(f.name).dump() + ", \"arguments\": "},
                    {"content", {{"type", "json_schema"}, {"json_schema", f.parameters}}},
                    {"end", "}\n</tool_call>"}});
  }
  const json tag = {{"type", "structural_tag"},
                    {"format", {{"type", "triggered_tags"}, {"triggers", json::array({"<tool_call>"})}, {"tags", tags}}}};
  return make(ConstraintKind::StructuralTag, tag.dump());
}

StructuredRequest parse_structured_request(const json& body, bool chat) {
  StructuredRequest r;
  parse_response_format(body, r);
  parse_structured_outputs(body, r);
  parse_guided(body, r);
  parse_tools(body, chat, r);
  if (std::optional<Constraint> c = tool_constraint(r)) set_constraint(r, std::move(*c), "tool_choice");
  return r;
}

bool required_present(const json& schema, const nlohmann::json& value) {
  if (!schema.is_object()) return true;
  if (value.is_object()) {
    if (const auto required = schema.find("required"); required != schema.end() && required->is_array()) {
      for (const auto& name : *required) {
        if (name.is_string() && !value.contains(name.get<std::string>())) return false;
      }
    }
    if (const auto properties = schema.find("properties"); properties != schema.end() && properties->is_object()) {
      for (const auto& [name, sub] : properties->items()) {
        if (value.contains(name) && !required_present(sub, value[name])) return false;
      }
    }
  } else if (value.is_array()) {
    if (const auto items = schema.find("items"); items != schema.end()) {
      for (const auto& item : value) {
        if (!required_present(*items, item)) return false;
      }
    }
  }
  return true;
}


}  // namespace kestrel::server
