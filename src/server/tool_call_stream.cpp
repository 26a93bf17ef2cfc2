#include "server/tool_call_stream.h"

#include <nlohmann/json.hpp>

#include "server/tool_calls.h"

namespace kestrel::server {

namespace {

const std::string kOpenTag = "<tool_call>";
const std::string kCloseTag = "</tool_call>";

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// A JSON string's raw text (between the quotes) decoded; the raw text when it does not decode.
std::string decode_string(const std::string& raw) {
  const nlohmann::json j = nlohmann::json::parse("\"" + raw + "\"", nullptr, false);
  return j.is_string() ? j.get<std::string>() : raw;
}

bool is_arguments_key(const std::string& key) { return key == "arguments" || key == "parameters"; }

}  // namespace

ToolCallStream::ToolCallStream(Format format, bool parallel_tool_calls)
    : format_(format),
      parallel_(parallel_tool_calls),
      mode_(format == Format::RequiredList ? Mode::Json : Mode::Content),
      call_depth_(format == Format::RequiredList ? 2 : 1) {}

std::vector<ToolCallStream::Delta> ToolCallStream::feed(std::string_view text) {
  std::vector<Delta> out;
  for (const char c : text) {
    switch (mode_) {
      case Mode::Content:
        content_char(c, &out);
        break;
      case Mode::Json:
        json_char(c, &out);
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
        content_char(c, &out);
        break;
    }
  }
  if (mode_ == Mode::Content) flush_content(&out, /*hold_whitespace=*/true);
  return out;
}

std::vector<ToolCallStream::Delta> ToolCallStream::finish() {
  std::vector<Delta> out;
  if (mode_ != Mode::Content) return out;
  if (calls_ > 0) {
    // The reply's content is trimmed when it carries calls (as extract_tool_calls does).
    while (!pending_.empty() && is_space(pending_.back())) pending_.pop_back();
  }
  if (!pending_.empty()) out.push_back({pending_, -1, "", "", ""});
  pending_.clear();
  return out;
}

void ToolCallStream::content_char(char c, std::vector<Delta>* out) {
  pending_ += c;
  if (pending_.size() >= kOpenTag.size() && pending_.compare(pending_.size() - kOpenTag.size(), kOpenTag.size(), kOpenTag) == 0) {
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
  if (format_ == Format::HermesTags) {
    for (size_t k = std::min(pending_.size(), kOpenTag.size() - 1); k > 0; --k) {
      if (pending_.compare(pending_.size() - k, k, kOpenTag, 0, k) == 0) {
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
