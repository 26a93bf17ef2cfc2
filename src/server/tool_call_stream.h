// Streams a tool-enabled chat reply as OpenAI streams one: content as it is written, each call's
// id and name once the name is complete, then its arguments as they are generated. For
// `tool_choice: required` (a JSON list of {"name", "parameters"} calls, shape guaranteed by the
// grammar) and `auto` under the Hermes/Qwen constraint (`<tool_call>` blocks of {"name",
// "arguments"}). Under `auto` the model may still write another format the whole-reply parser
// knows (extract_tool_calls: a reply of only JSON, bare or in a ```json block, Mistral's
// [TOOL_CALLS], Gemma's ```tool_code or a reply of only Python calls): text that may be one of those is held back to the end and
// parsed there, so a stream carries the same calls as the whole reply would (and the same content,
// but for whitespace next to a call, which is sent before the call is known).
// The arguments stream as the model writes them (its whitespace included), as vLLM streams them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "sched/request.h"
#include "server/structured_request.h"

namespace kestrel::server {

class ToolCallStream {
 public:
  enum class Format {
    RequiredList,  // [{"name": ..., "parameters": {...}}, ...]
    HermesTags,    // text <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> text ...
  };

  // One piece of a delta: content text, or a part of call `call` (its id and name on its first).
  struct Delta {
    std::string content;
    int call = -1;
    std::string id, name;
    std::string arguments;
  };

  // `request`: the tools and choice (for the whole-reply formats); kept by reference.
  ToolCallStream(Format format, const StructuredRequest& request);

  // The deltas `text` (the reply's next characters) completes; text that may still turn out to be
  // part of a tag, and whitespace that may end the content, are held back.
  std::vector<Delta> feed(std::string_view text);
  // At the end of the reply (how it ended): what was held back, content or calls.
  std::vector<Delta> finish(FinishReason finish);

  int calls() const { return calls_; }

 private:
  void feed_char(char c, std::vector<Delta>* out);
  void undecided_char(char c, std::vector<Delta>* out);
  void content_char(char c, std::vector<Delta>* out);
  void emit_whole_reply(FinishReason finish, std::vector<Delta>* out);
  void json_char(char c, std::vector<Delta>* out);
  void flush_content(std::vector<Delta>* out, bool hold_whitespace);
  void emit_arguments(std::string_view text, std::vector<Delta>* out);
  bool call_visible() const { return parallel_ || calls_ == 0; }

  // Undecided: the reply so far may be a whole-reply call (held); HoldToEnd: it may be, from
  // `pending_` on, so everything waits for finish().
  enum class Mode { Undecided, Content, Json, CloseTag, HoldToEnd };
  Format format_;
  const StructuredRequest& request_;
  bool parallel_;
  Mode mode_;
  std::string pending_;  // content held back: a possible "<tool_call>" start or trailing whitespace
  size_t close_matched_ = 0;  // characters of "</tool_call>" seen

  // The JSON scanner: depth counts open objects and arrays; a call object sits at call_depth_.
  int call_depth_;
  int depth_ = 0;
  bool in_string_ = false, escape_ = false;
  std::string string_;  // the raw text of the string being read (at the call's depth)
  enum class Expect { Key, Colon, Value, Comma } expect_ = Expect::Key;
  std::string key_;
  bool in_arguments_ = false;
  int arguments_depth_ = 0;   // depth_ when the arguments value started
  bool arguments_scalar_ = false;
  std::string name_;           // the current call's name, once complete
  std::string held_arguments_; // arguments written before the name (emitted with it)
  bool call_open_ = false;     // inside a call object
  int calls_ = 0;              // calls completed
};

}  // namespace kestrel::server
