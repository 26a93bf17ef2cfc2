#include "server/tool_call_stream.h"

#include <cctype>

#include <nlohmann/json.hpp>

#include "server/tool_calls.h"

namespace kestrel::server {

namespace {

const std::string kOpenTag = "<tool_call>";
const std::string kCloseTag = "</tool_call>";
const std::string kFence = "```tool_code";  // Gemma's calls
const std::string kJsonFence = "```json";   // a reply of only a fenced call (Qwen2.5-Coder)

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// A JSON string's raw text (between the quotes) decoded; the raw text when it does not decode.
std::string decode_string(const std::string& raw) {
  const nlohmann::json j = nlohmann::json::parse("\"" + raw + "\"", nullptr, false);
  return j.is_string() ? j.get<std::string>() : raw;
}

bool is_arguments_key(const std::string& key) { return key == "arguments" || key == "parameters"; }

}  // namespace

ToolCallStream::ToolCallStream(Format format, const StructuredRequest& request)
    : format_(format),
      request_(request),
      parallel_(request.parallel_tool_calls),
      mode_(format == Format::RequiredList ? Mode::Json : Mode::Undecided),
      call_depth_(format == Format::RequiredList ? 2 : 1) {}

std::vector<ToolCallStream::Delta> ToolCallStream::feed(std::string_view text) {
  std::vector<Delta> out;
  for (const char c : text) feed_char(c, &out);
  if (mode_ == Mode::Content) flush_content(&out, /*hold_whitespace=*/true);
  return out;
}

void ToolCallStream::feed_char(char c, std::vector<Delta>* out) {
  switch (mode_) {
    case Mode::Undecided:
      undecided_char(c, out);
      break;
    case Mode::Content:
      content_char(c, out);
      break;
    case Mode::Json:
      json_char(c, out);
      break;
    case Mode::CloseTag:
      if (close_matched_ == 0 && is_space(c)) break;
      if (c == kCloseTag[close_matched_]) {
        if (++close_matched_ == kCloseTag.size()) mode_ = Mode::Content;
        break;
      }
      // Not the closing tag (only possible without the constraint): what was read is content.
      pending_ += kCloseTag.substr(0, close_matched_);
      mode_ = Mode::Content;
      content_char(c, out);
      break;
    case Mode::HoldToEnd:
      pending_ += c;
      break;
  }
}

std::vector<ToolCallStream::Delta> ToolCallStream::finish(FinishReason finish) {
  std::vector<Delta> out;
  if (mode_ == Mode::Undecided || mode_ == Mode::HoldToEnd) {
    emit_whole_reply(finish, &out);
    return out;
  }
  if (mode_ != Mode::Content) return out;
  if (calls_ > 0) {
    // The reply's content is trimmed when it carries calls (as extract_tool_calls does).
    while (!pending_.empty() && is_space(pending_.back())) pending_.pop_back();
  }
  if (!pending_.empty()) out.push_back({pending_, -1, "", "", ""});
  pending_.clear();
  return out;
}

// The start of an `auto` reply: held while it may still be a reply of only JSON (Llama 3.x,
// Mistral's [TOOL_CALLS] list, or in a ```json block), a ```tool_code block or a Python call
// (Gemma); content otherwise.
void ToolCallStream::undecided_char(char c, std::vector<Delta>* out) {
  pending_ += c;
  const size_t start = pending_.find_first_not_of(" \t\r\n");
  if (start == std::string::npos) return;
  const std::string_view head = std::string_view(pending_).substr(start);
  if (head[0] == '{' || head[0] == '[') {
    mode_ = Mode::HoldToEnd;
    return;
  }
  if (head[0] == '`') {
    for (const std::string& fence : {kFence, kJsonFence}) {
      if (head.size() < fence.size() && fence.compare(0, head.size(), head) == 0) return;
      if (head.compare(0, fence.size(), fence) == 0) {
        mode_ = Mode::HoldToEnd;
        return;
      }
    }
  } else if (std::isalpha(uint8_t(head[0])) || head[0] == '_') {
    size_t i = 0;
    while (i < head.size() && (std::isalnum(uint8_t(head[i])) || head[i] == '_' || head[i] == '.')) ++i;
    if (i == head.size()) return;  // the first word is not complete yet
    if (head[i] == '(') {
      mode_ = Mode::HoldToEnd;
      return;
    }
  }
  // Plain text: what was held goes through content mode (it may begin a tag).
  mode_ = Mode::Content;
  std::string held;
  held.swap(pending_);
  for (const char h : held) feed_char(h, out);
}

// The rest of the reply was held: parsed whole, as extract_tool_calls parses a reply.
void ToolCallStream::emit_whole_reply(FinishReason finish, std::vector<Delta>* out) {
  const ToolCallReply reply = extract_tool_calls(request_, pending_, finish);
  if (reply.tool_calls.empty()) {
    if (!pending_.empty()) out->push_back({pending_, -1, "", "", ""});
  } else {
    if (reply.content) out->push_back({*reply.content, -1, "", "", ""});
    for (const auto& call : reply.tool_calls) {
      if (call_visible()) {
        out->push_back({"", calls_, call["id"].get<std::string>(), call["function"]["name"].get<std::string>(),
                        call["function"]["arguments"].get<std::string>()});
      }
      ++calls_;
    }
  }
  pending_.clear();
}

void ToolCallStream::content_char(char c, std::vector<Delta>* out) {
  pending_ += c;
  auto ends_with = [&](const std::string& tag) {
    return pending_.size() >= tag.size() && pending_.compare(pending_.size() - tag.size(), tag.size(), tag) == 0;
  };
  if (ends_with(kFence)) {
    // A Gemma block after some text: it and what follows are parsed when the reply ends.
    pending_.resize(pending_.size() - kFence.size());
    flush_content(out, /*hold_whitespace=*/false);
    pending_ = kFence;
    mode_ = Mode::HoldToEnd;
    return;
  }
  if (ends_with(kOpenTag)) {
    pending_.resize(pending_.size() - kOpenTag.size());
    // Whitespace right before a call is not content.
    while (!pending_.empty() && is_space(pending_.back())) pending_.pop_back();
    flush_content(out, /*hold_whitespace=*/false);
    mode_ = Mode::Json;
    depth_ = 0;
    in_string_ = escape_ = false;
    expect_ = Expect::Key;
  }
}

void ToolCallStream::flush_content(std::vector<Delta>* out, bool hold_whitespace) {
  // Hold back the longest end of the text that may begin "<tool_call>", and the whitespace before
  // it (it may be the end of the content).
  size_t keep = 0;
  for (const std::string& tag : {kOpenTag, kFence}) {
    for (size_t k = std::min(pending_.size(), tag.size() - 1); k > keep; --k) {
      if (pending_.compare(pending_.size() - k, k, tag, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  if (hold_whitespace) {
    while (keep < pending_.size() && is_space(pending_[pending_.size() - keep - 1])) ++keep;
  }
  if (keep == pending_.size()) return;
  const std::string text = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  if (!out->empty() && out->back().call < 0) {
    out->back().content += text;
  } else {
    out->push_back({text, -1, "", "", ""});
  }
}

void ToolCallStream::emit_arguments(std::string_view text, std::vector<Delta>* out) {
  if (!call_visible()) return;
  if (name_.empty()) {
    held_arguments_ += text;
    return;
  }
  if (!out->empty() && out->back().call == calls_) {
    out->back().arguments += text;
  } else {
    out->push_back({"", calls_, "", "", std::string(text)});
  }
}

// One character of a call's JSON (a Hermes block's object, or `required`'s list of objects).
void ToolCallStream::json_char(char c, std::vector<Delta>* out) {
  const bool at_call = depth_ == call_depth_ && call_open_;
  if (in_string_) {
    if (in_arguments_) emit_arguments(std::string_view(&c, 1), out);
    if (escape_) {
      escape_ = false;
      string_ += c;
    } else if (c == '\\') {
      escape_ = true;
      string_ += c;
    } else if (c != '"') {
      string_ += c;
    } else {
      in_string_ = false;
      if (in_arguments_) {
        if (arguments_scalar_ && depth_ == arguments_depth_) in_arguments_ = false, expect_ = Expect::Comma;
      } else if (at_call && expect_ == Expect::Key) {
        key_ = decode_string(string_);
        expect_ = Expect::Colon;
      } else if (at_call && expect_ == Expect::Value) {
        if (key_ == "name" && name_.empty()) {
          name_ = decode_string(string_);
          if (call_visible()) {
            out->push_back({"", calls_, new_tool_call_id(), name_, held_arguments_});
            held_arguments_.clear();
          }
        }
        expect_ = Expect::Comma;
      }
    }
    return;
  }
  if (in_arguments_) {
    const bool scalar_ends = arguments_scalar_ && depth_ == arguments_depth_ && (c == ',' || c == '}' || c == ']');
    if (!scalar_ends) {
      emit_arguments(std::string_view(&c, 1), out);
      if (c == '"') {
        in_string_ = true;
        string_.clear();
      } else if (c == '{' || c == '[') {
        ++depth_;
      } else if (c == '}' || c == ']') {
        if (--depth_ == arguments_depth_) in_arguments_ = false, expect_ = Expect::Comma;
      }
      return;
    }
    in_arguments_ = false;  // a number or literal ended: c belongs to the call object
    expect_ = Expect::Comma;
  }
  if (is_space(c)) return;
  const bool value_here = at_call && expect_ == Expect::Value;
  if (value_here && is_arguments_key(key_)) {
    // The arguments value starts: everything up to its end streams.
    in_arguments_ = true;
    arguments_depth_ = depth_;
    arguments_scalar_ = c != '{' && c != '[';
    emit_arguments(std::string_view(&c, 1), out);
    if (c == '"') {
      in_string_ = true;
      string_.clear();
    } else if (!arguments_scalar_) {
      ++depth_;
    }
    return;
  }
  switch (c) {
    case '"':
      in_string_ = true;
      string_.clear();
      return;
    case '{':
    case '[':
      if (value_here) expect_ = Expect::Comma;
      if (++depth_ == call_depth_ && c == '{') {
        call_open_ = true;
        name_.clear();
        held_arguments_.clear();
        expect_ = Expect::Key;
      }
      return;
    case '}':
    case ']':
      if (at_call && c == '}') {
        call_open_ = false;
        ++calls_;
      }
      --depth_;
      if (format_ == Format::HermesTags && depth_ == 0) {
        mode_ = Mode::CloseTag;
        close_matched_ = 0;
      }
      return;
    case ':':
      if (at_call && expect_ == Expect::Colon) expect_ = Expect::Value;
      return;
    case ',':
      if (at_call) expect_ = Expect::Key;
      return;
    default:
      if (value_here) expect_ = Expect::Comma;  // a number or literal of another key
      return;
  }
}

}  // namespace kestrel::server
