// Built-in chat templates, written for Kestrel to reproduce well-known prompt formats for plain
// text conversations (no tools, no images).
#include <string>
#include <utility>
#include <vector>

#include "chat/chat_template.h"

namespace kestrel::chat {
namespace {

// <|im_start|>role\ncontent<|im_end|>\n per message.
constexpr const char* kChatML = R"JINJA({%- for message in messages -%}
    {{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
)JINJA";

// ChatML with a default system prompt when the conversation has none (Qwen2 / Qwen2.5 Instruct);
// the default prompt goes between the two halves.
constexpr const char* kQwenHead = R"JINJA({%- if messages and messages[0]['role'] == 'system' -%}
    {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' -}}
{%- else -%}
    {{- '<|im_start|>system\n)JINJA";
constexpr const char* kQwenTail = R"JINJA(<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
    {%- if not (loop.first and message['role'] == 'system') -%}
        {{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
)JINJA";

// Llama 3.1 / 3.2 / 3.3 Instruct: a system header with the knowledge cutoff and date, then one
// header + trimmed content + <|eot_id|> per message.
constexpr const char* kLlama3 = R"JINJA({{- bos_token -}}
{%- set today = date_string if date_string is defined else '26 Jul 2024' -%}
{%- set turns = messages -%}
{%- set system_text = '' -%}
{%- if messages and messages[0]['role'] == 'system' -%}
    {%- set system_text = messages[0]['content'] | trim -%}
    {%- set turns = messages[1:] -%}
{%- endif -%}
{{- '<|start_header_id|>system<|end_header_id|>\n\n' -}}
{{- 'Cutting Knowledge Date: December 2023\nToday Date: ' + today + '\n\n' -}}
{{- system_text + '<|eot_id|>' -}}
{%- for turn in turns -%}
    {{- '<|start_header_id|>' + turn['role'] + '<|end_header_id|>\n\n' + turn['content'] | trim + '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
{%- endif -%}
)JINJA";

// Llama 2 chat: [INST] blocks, the system prompt wrapped in <<SYS>> inside the first one.
constexpr const char* kLlama2 = R"JINJA({%- set bos = bos_token if bos_token is defined else '' -%}
{%- set eos = eos_token if eos_token is defined else '' -%}
{%- set turns = messages -%}
{%- set system_text = '' -%}
{%- if messages and messages[0]['role'] == 'system' -%}
    {%- set system_text = '<<SYS>>\n' + messages[0]['content'] + '\n<</SYS>>\n\n' -%}
    {%- set turns = messages[1:] -%}
{%- endif -%}
{%- for turn in turns -%}
    {%- if (turn['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}
    {%- endif -%}
    {%- set text = ((system_text if loop.first else '') + turn['content']) | trim -%}
    {%- if turn['role'] == 'user' -%}
        {{- bos + '[INST] ' + text + ' [/INST]' -}}
    {%- else -%}
        {{- ' ' + text + ' ' + eos -}}
    {%- endif -%}
{%- endfor -%}
)JINJA";

// Mistral v3 (Tekken, e.g. Mistral Nemo): [INST]user[/INST]answer</s>, the system prompt put in
// front of the last user message.
constexpr const char* kMistral = R"JINJA({%- set eos = eos_token if eos_token is defined else '' -%}
{%- set turns = messages -%}
{%- if messages and messages[0]['role'] == 'system' -%}
    {%- set system_text = messages[0]['content'] -%}
    {%- set turns = messages[1:] -%}
{%- endif -%}
{%- for turn in turns -%}
    {%- if (turn['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') -}}
    {%- endif -%}
{%- endfor -%}
{{- bos_token -}}
{%- for turn in turns -%}
    {%- if turn['role'] == 'user' -%}
        {%- if loop.last and system_text is defined -%}
            {{- '[INST]' + system_text + '\n\n' + turn['content'] + '[/INST]' -}}
        {%- else -%}
            {{- '[INST]' + turn['content'] + '[/INST]' -}}
        {%- endif -%}
    {%- elif turn['role'] == 'assistant' -%}
        {{- turn['content'] + eos -}}
    {%- else -%}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') -}}
    {%- endif -%}
{%- endfor -%}
)JINJA";

// Gemma 2 / 3: <start_of_turn>user|model, the system prompt merged into the first user turn.
constexpr const char* kGemma = R"JINJA({{- bos_token -}}
{%- set turns = messages -%}
{%- set prefix = '' -%}
{%- if messages and messages[0]['role'] == 'system' -%}
    {%- set prefix = messages[0]['content'] + '\n\n' -%}
    {%- set turns = messages[1:] -%}
{%- endif -%}
{%- for turn in turns -%}
    {%- if (turn['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}
    {%- endif -%}
    {{- '<start_of_turn>' + ('model' if turn['role'] == 'assistant' else turn['role']) + '\n' -}}
    {{- (prefix if loop.first else '') + turn['content'] | trim + '<end_of_turn>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<start_of_turn>model\n' -}}
{%- endif -%}
)JINJA";

const std::vector<std::pair<std::string, std::string>>& templates() {
  static const std::vector<std::pair<std::string, std::string>> table = {
      {"chatml", kChatML},
      {"llama3", kLlama3},
      {"llama2", kLlama2},
      {"mistral", kMistral},
      {"gemma", kGemma},
      {"qwen2", std::string(kQwenHead) + "You are a helpful assistant." + kQwenTail},
      {"qwen2.5", std::string(kQwenHead) +
                      "You are Qwen, created by Alibaba Cloud. You are a helpful assistant." + kQwenTail},
  };
  return table;
}

}  // namespace

std::optional<std::string> builtin_chat_template(std::string_view name) {
  for (const auto& [key, source] : templates())
    if (name == key) return source;
  return std::nullopt;
}

std::vector<std::string> builtin_chat_template_names() {
  std::vector<std::string> names;
  for (const auto& entry : templates()) names.push_back(entry.first);
  return names;
}

}  // namespace kestrel::chat
