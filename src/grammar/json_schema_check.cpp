#include "grammar/json_schema_check.h"

#include <fmt/format.h>

#include <set>

namespace kestrel::grammar {
namespace {

using json = nlohmann::json;

// Keywords xgrammar's JSON Schema converter enforces.
const std::set<std::string> kEnforced = {
    "type", "properties", "required", "additionalProperties", "patternProperties", "propertyNames",
    "minProperties", "maxProperties", "unevaluatedProperties", "items", "prefixItems", "unevaluatedItems",
    "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength", "maxLength",
    "pattern", "format"};
// Annotations: they describe, they do not constrain.
const std::set<std::string> kAnnotations = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "$anchor", "deprecated",
    "readOnly", "writeOnly", "contentMediaType", "contentEncoding"};
const std::set<std::string> kFormats = {
    "email", "date", "time", "date-time", "duration", "hostname", "uuid", "ipv4", "ipv6", "uri",
    "uri-reference", "uri-template", "json-pointer", "relative-json-pointer"};

std::string check(const json& schema, const std::string& at);

std::string check_map(const json& map, const std::string& at) {
  if (!map.is_object()) return "";
  for (const auto& [name, sub] : map.items()) {
    if (std::string why = check(sub, at + "/" + name); !why.empty()) return why;
  }
  return "";
}

std::string check_list(const json& list, const std::string& at) {
  if (!list.is_array()) return "";
  for (size_t i = 0; i < list.size(); ++i) {
    if (std::string why = check(list[i], fmt::format("{}/{}", at, i)); !why.empty()) return why;
  }
  return "";
}

std::string check(const json& schema, const std::string& at) {
  if (!schema.is_object()) return "";  // true/false, or a malformed value the converter reports
  const std::string where = at.empty() ? "the schema's root" : at;
  for (const auto& [key, value] : schema.items()) {
    if (!kEnforced.count(key) && !kAnnotations.count(key)) {
      return fmt::format("keyword '{}' at {} is not supported", key, where);
    }
  }
  if (const auto f = schema.find("format"); f != schema.end() && f->is_string() && !kFormats.count(f->get<std::string>())) {
    return fmt::format("format '{}' at {} is not supported (supported: {})", f->get<std::string>(), where,
                       fmt::join(kFormats, ", "));
  }
  for (const char* key : {"properties", "patternProperties", "$defs", "definitions"}) {
    if (const auto it = schema.find(key); it != schema.end()) {
      if (std::string why = check_map(*it, at + "/" + key); !why.empty()) return why;
    }
  }
  for (const char* key : {"items", "additionalProperties", "unevaluatedProperties", "unevaluatedItems", "propertyNames"}) {
    if (const auto it = schema.find(key); it != schema.end()) {
      if (std::string why = it->is_array() ? check_list(*it, at + "/" + key) : check(*it, at + "/" + key); !why.empty()) return why;
    }
  }
  for (const char* key : {"prefixItems", "anyOf", "oneOf", "allOf"}) {
    if (const auto it = schema.find(key); it != schema.end()) {
      if (std::string why = check_list(*it, at + "/" + key); !why.empty()) return why;
    }
  }
  return "";
}

}  // namespace

std::string unsupported_schema_feature(const json& schema) { return check(schema, ""); }

}  // namespace kestrel::grammar
