// Streams a tool-enabled chat reply as OpenAI streams one: content as it is written, each call's
// id and name once the name is complete, then its arguments as they are generated. Only for
// outputs whose shape the grammar guarantees: `tool_choice: required` (a JSON list of
// {"name", "parameters"} calls) and `auto` under the Hermes/Qwen constraint (`<tool_call>` blocks
// of {"name", "arguments"}). Other `auto` formats (Llama 3.x JSON, Mistral's [TOOL_CALLS]) are
// recognised only in the whole reply (extract_tool_calls), so they are sent when it ends.
// The arguments stream as the model writes them (its whitespace included), as vLLM streams them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

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

  ToolCallStream(Format format, bool parallel_tool_calls);

  // The deltas `text` (the reply's next characters) completes; text that may still turn out to be
  // part of a tag, and whitespace that may end the content, are held back.
  std::vector<Delta> feed(std::string_view text);
  // At the end of the reply: the held-back content that is content after all.
  std::vector<Delta> finish();

  int calls() const { return calls_; }

 private:
  void content_char(char c, std::vector<Delta>* out);
  void json_char(char c, std::vector<Delta>* out);
  void flush_content(std::vector<Delta>* out, bool hold_whitespace);
  void emit_arguments(std::string_view text, std::vector<Delta>* out);
  bool call_visible() const { return parallel_ || calls_ == 0; }

  enum class Mode { Content, Json, CloseTag };
  Format format_;
  bool parallel_;
  Mode mode_;
  std::string pending_;  // content held back: a possible "<tool_call>" start or trailing whitespace
  bool content_started_ = false;
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
