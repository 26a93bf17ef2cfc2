#include "server/tool_calls.h"

#include <algorithm>
#include <random>
#include <sstream>

#include "server/python_calls.h"

namespace kestrel::server {

std::string new_tool_call_id() {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::random_device entropy;
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[entropy() % (sizeof(kAlphabet) - 1)];
  return id;
}

namespace {

using json = nlohmann::json;

json call(const std::string& name, const std::string& arguments) {
  return {{"id", new_tool_call_id()}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}};
}

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\r\n") - begin + 1);
}

// The offered function `name`, or null.
const ToolFunction* offered(const StructuredRequest& request, const std::string& name) {
  const auto f = std::find_if(request.tools.begin(), request.tools.end(), [&](const ToolFunction& t) { return t.name == name; });
  return f == request.tools.end() ? nullptr : &*f;
}

// A call of offered function `f` with `arguments` (JSON text), unless they do not match its
// parameters (request.arguments_match).
std::optional<json> checked_call(const StructuredRequest& request, const ToolFunction& f, const std::string& arguments) {
  if (request.arguments_match && !request.arguments_match(f, arguments)) return std::nullopt;
  return call(f.name, arguments);
}

// {"name": f, "arguments" | "parameters": {...} or a JSON string} naming a known function.
std::optional<json> as_call(const json& j, const StructuredRequest& request) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  const ToolFunction* f = offered(request, j["name"].get<std::string>());
  if (f == nullptr) return std::nullopt;
  json args = j.contains("arguments") ? j["arguments"] : j.contains("parameters") ? j["parameters"] : json::object();
  if (args.is_string()) return checked_call(request, *f, args.get<std::string>());
  if (!args.is_object()) return std::nullopt;
  return checked_call(request, *f, args.dump());
}

// Python-style calls (Gemma's tool_code) of offered functions, as OpenAI calls; empty when `code`
// is anything else. Positional arguments take the parameter names in the schema's order; a
// `module.` prefix (Gemma writes `default_api.f(...)`) is dropped.
json python_tool_calls(const StructuredRequest& request, const std::string& code) {
  const std::optional<std::vector<PythonCall>> parsed = parse_python_calls(code);
  if (!parsed) return json::array();
  json calls = json::array();
  for (const PythonCall& c : *parsed) {
    const std::string name = c.name.substr(c.name.rfind('.') == std::string::npos ? 0 : c.name.rfind('.') + 1);
    const ToolFunction* f = offered(request, name);
    if (f == nullptr) return json::array();
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    const auto properties = f->parameters.find("properties");
    auto next_name = properties != f->parameters.end() && properties->is_object() ? properties->begin()
                                                                                  : nlohmann::ordered_json::const_iterator();
    for (const auto& v : c.positional) {
      if (properties == f->parameters.end() || !properties->is_object() || next_name == properties->end()) {
        return json::array();  // more positional arguments than the function has parameters
      }
      args[next_name.key()] = v;
      ++next_name;
    }
    for (const auto& [key, v] : c.keywords.items()) {
      if (args.contains(key)) return json::array();
      args[key] = v;
    }
    const std::optional<json> checked = checked_call(request, *f, args.dump());
    if (!checked) return json::array();
    calls.push_back(*checked);
  }
  return calls;
}

ToolCallReply content_only(const std::string& text, FinishReason finish) {
  ToolCallReply r;
  r.content = text;
  r.finish_reason = finish == FinishReason::Length ? "length" : "stop";
  return r;
}

}  // namespace

ToolCallReply extract_tool_calls(const StructuredRequest& request, const std::string& text, FinishReason finish) {
  if (finish != FinishReason::Stop) return content_only(text, finish);
  ToolCallReply reply;
  switch (request.tool_choice) {
    case ToolChoice::None:
      return content_only(text, finish);
    case ToolChoice::Named: {
      const json args = json::parse(text, nullptr, false);
      if (args.is_discarded()) return content_only(text, finish);
      reply.tool_calls.push_back(call(request.named_tool, args.dump()));
      reply.finish_reason = "stop";  // as OpenAI and vLLM answer a forced function
      return reply;
    }
    case ToolChoice::Required: {
      const json calls = json::parse(text, nullptr, false);
      if (!calls.is_array()) return content_only(text, finish);
      for (const json& c : calls) {
        if (!c.is_object() || !c.contains("name") || !c["name"].is_string()) return content_only(text, finish);
        reply.tool_calls.push_back(call(c["name"].get<std::string>(), c.value("parameters", json::object()).dump()));
      }
      reply.finish_reason = "tool_calls";
      return reply;
    }
    case ToolChoice::Auto:
      break;
  }
  // Auto: <tool_call> blocks anywhere in the reply; the text around them is the content.
  std::string content;
  size_t pos = 0;
  static const std::string kOpen = "<tool_call>", kClose = "</tool_call>";
  for (;;) {
    const size_t open = text.find(kOpen, pos);
    if (open == std::string::npos) break;
    // The call is the one JSON value after the tag (read as far as it goes, so a "</tool_call>"
    // inside an argument string does not end it), then the closing tag (or the end of the text).
    const size_t body = open + kOpen.size();
    std::istringstream in(text.substr(body));
    json j;
    try {
      in >> j;
    } catch (const json::exception&) {
      break;  // not a well-formed call: leave the rest as content
    }
    const std::optional<json> c = as_call(j, request);
    if (!c) break;
    size_t end = in.eof() ? text.size() : body + size_t(in.tellg());
    end = std::min(text.size(), std::max(end, text.find_first_not_of(" \t\r\n", end)));
    if (text.compare(end, kClose.size(), kClose) == 0) {
      end += kClose.size();
    } else if (end != text.size()) {
      break;  // something else follows the call: not a block
    }
    content += text.substr(pos, open - pos);
    reply.tool_calls.push_back(*c);
    pos = end;
  }
  content += text.substr(pos);
  if (reply.tool_calls.empty()) {
    std::string body = trim(text);
    if (body.rfind("[TOOL_CALLS]", 0) == 0) body = trim(body.substr(12));
    // Qwen2.5-Coder writes its call as a reply of only a ```json block.
    if (body.size() >= 10 && body.rfind("```json", 0) == 0 && body.compare(body.size() - 3, 3, "```") == 0) {
      body = trim(body.substr(7, body.size() - 10));
    }
    const json j = json::parse(body, nullptr, false);
    if (!j.is_discarded()) {
      json list = j.is_array() ? j : json::array({j});
      json calls = json::array();
      for (const json& item : list) {
        const std::optional<json> c = as_call(item, request);
        if (!c) {
          calls.clear();
          break;
        }
        calls.push_back(*c);
      }
      if (!calls.empty()) {
        reply.tool_calls = calls;
        content.clear();
      }
    }
  }
  if (reply.tool_calls.empty()) {
    // Gemma: ```tool_code blocks of Python calls, or a reply that is only such calls.
    static const std::string kFence = "```tool_code", kEnd = "```";
    std::string outside;
    size_t at = 0;
    json calls = json::array();
    for (size_t open = text.find(kFence); open != std::string::npos; open = text.find(kFence, at)) {
      const size_t body = open + kFence.size();
      const size_t close = text.find(kEnd, body);
      const size_t body_end = close == std::string::npos ? text.size() : close;
      const json found = python_tool_calls(request, text.substr(body, body_end - body));
      if (found.empty()) break;
      for (const json& c : found) calls.push_back(c);
      outside += text.substr(at, open - at);
      at = close == std::string::npos ? text.size() : close + kEnd.size();
    }
    if (calls.empty()) {
      calls = python_tool_calls(request, text);
      if (!calls.empty()) at = text.size();
    }
    if (!calls.empty()) {
      reply.tool_calls = calls;
      content = outside + text.substr(at);
    }
  }
  if (reply.tool_calls.empty()) return content_only(text, finish);
  if (!request.parallel_tool_calls && reply.tool_calls.size() > 1) reply.tool_calls.erase(reply.tool_calls.begin() + 1, reply.tool_calls.end());
  const std::string rest = trim(content);
  if (!rest.empty()) reply.content = rest;
  reply.finish_reason = "tool_calls";
  return reply;
}

}  // namespace kestrel::server
