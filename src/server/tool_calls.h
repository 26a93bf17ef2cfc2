// Turns a tool-enabled chat reply into OpenAI's message {content, tool_calls}. With a named tool
// choice the constrained output is the function's arguments; with `required` it is the list of
// {name, parameters} calls; with `auto` the model wrote its own format, recognised here:
// Hermes/Qwen2.5 `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks, Mistral's
// `[TOOL_CALLS] [...]`, a reply that is only a {"name", "arguments"|"parameters"} object
// (Llama 3.x) or a list of them, bare or in one ```json block (Qwen2.5-Coder), and Gemma's Python-style calls (```tool_code blocks, or a reply of only calls:
// python_calls.h). Calls to functions not in the request's tools stay in the content.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "sched/request.h"
#include "server/structured_request.h"

namespace kestrel::server {

struct ToolCallReply {
  std::optional<std::string> content;          // nullopt: null (only tool calls)
  nlohmann::json tool_calls = nlohmann::json::array();  // [{id, type, function: {name, arguments}}]
  std::string finish_reason;                   // OpenAI's: "tool_calls" when the model called tools
};

// A fresh tool call id ("call_" and 24 random letters and digits).
std::string new_tool_call_id();

// `finish` is how generation ended (a reply cut by the length limit is returned as content).
ToolCallReply extract_tool_calls(const StructuredRequest& request, const std::string& text, FinishReason finish);

}  // namespace kestrel::server
