#include "server/tool_calls.h"

#include <random>
#include <set>

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

// {"name": f, "arguments" | "parameters": {...} or a JSON string} naming a known function.
std::optional<json> as_call(const json& j, const std::set<std::string>& names) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string() || !names.count(j["name"].get<std::string>())) {
    return std::nullopt;
  }
  json args = j.contains("arguments") ? j["arguments"] : j.contains("parameters") ? j["parameters"] : json::object();
  if (args.is_string()) return call(j["name"].get<std::string>(), args.get<std::string>());
  if (!args.is_object()) return std::nullopt;
  return call(j["name"].get<std::string>(), args.dump());
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
  std::set<std::string> names;
  for (const ToolFunction& f : request.tools) names.insert(f.name);
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
    const size_t close = text.find(kClose, open + kOpen.size());
    const size_t body_end = close == std::string::npos ? text.size() : close;
    const json j = json::parse(text.substr(open + kOpen.size(), body_end - open - kOpen.size()), nullptr, false);
    const std::optional<json> c = j.is_discarded() ? std::nullopt : as_call(j, names);
    if (!c) break;  // not a well-formed call: leave the rest as content
    content += text.substr(pos, open - pos);
    reply.tool_calls.push_back(*c);
    pos = close == std::string::npos ? text.size() : close + kClose.size();
  }
  content += text.substr(pos);
  if (reply.tool_calls.empty()) {
    std::string body = trim(text);
    if (body.rfind("[TOOL_CALLS]", 0) == 0) body = trim(body.substr(12));
    const json j = json::parse(body, nullptr, false);
    if (!j.is_discarded()) {
      json list = j.is_array() ? j : json::array({j});
      json calls = json::array();
      for (const json& item : list) {
        const std::optional<json> c = as_call(item, names);
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
  if (reply.tool_calls.empty()) return content_only(text, finish);
  if (!request.parallel_tool_calls && reply.tool_calls.size() > 1) reply.tool_calls.erase(reply.tool_calls.begin() + 1, reply.tool_calls.end());
  const std::string rest = trim(content);
  if (!rest.empty()) reply.content = rest;
  reply.finish_reason = "tool_calls";
  return reply;
}

}  // namespace kestrel::server
