// Streaming tool calls (ToolCallStream) without a model: the deltas of a `required` list and of
// Hermes `<tool_call>` replies, fed in pieces of every size, add up to what the whole-reply parser
// (extract_tool_calls, nlohmann's JSON parser on the complete text) gives: the same content, the
// same calls in order with the same names, arguments that parse to the same JSON, the same content
// but for whitespace next to a call; each call's id and name come once, on its first delta, before
// any of its arguments. Text that is not a call is content exactly as written.
#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "server/structured_request.h"
#include "server/tool_call_stream.h"
#include "server/tool_calls.h"

namespace kestrel::server {
namespace {

using json = nlohmann::json;

struct Assembled {
  std::string content;
  std::vector<std::string> names, arguments;
};

// Feeds `text` in pieces of `piece` bytes (0: random sizes from `seed`) and assembles the deltas
// as an OpenAI client does, checking the order of each call's parts on the way.
Assembled stream(ToolCallStream::Format format, const StructuredRequest& request, const std::string& text, size_t piece,
                 uint64_t seed = 0) {
  ToolCallStream s(format, request);
  std::mt19937_64 rng(seed);
  std::vector<ToolCallStream::Delta> deltas;
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = piece > 0 ? piece : 1 + rng() % 7;
    for (auto& d : s.feed(std::string_view(text).substr(pos, n))) deltas.push_back(std::move(d));
    pos += n;
  }
  for (auto& d : s.finish(FinishReason::Stop)) deltas.push_back(std::move(d));
  Assembled a;
  for (const auto& d : deltas) {
    if (d.call < 0) {
      EXPECT_TRUE(d.arguments.empty() && d.id.empty());
      a.content += d.content;
      continue;
    }
    if (!d.id.empty()) {
      EXPECT_EQ(size_t(d.call), a.names.size()) << "calls open in order, each once";
      EXPECT_EQ(d.id.rfind("call_", 0), 0u);
      a.names.push_back(d.name);
      a.arguments.emplace_back();
    }
    EXPECT_EQ(size_t(d.call) + 1, a.names.size()) << "arguments of call " << d.call << " before its name";
    if (size_t(d.call) + 1 == a.names.size()) a.arguments.back() += d.arguments;
  }
  EXPECT_EQ(s.calls() > 0, !a.names.empty() || !request.parallel_tool_calls);
  return a;
}

StructuredRequest request(const std::string& choice, bool parallel = true) {
  const json tools = json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}])");
  nlohmann::ordered_json body = {{"tools", tools}, {"tool_choice", choice}, {"parallel_tool_calls", parallel}};
  return parse_structured_request(body, true);
}

// Text with its whitespace runs as single spaces, trimmed: the stream sends content before it knows
// a call follows, so the whitespace next to a call may differ from the whole reply's.
std::string squash(const std::string& s) {
  std::string out;
  for (const char c : s) {
    const bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r';
    if (!space) {
      out += c;
    } else if (!out.empty() && out.back() != ' ') {
      out += ' ';
    }
  }
  if (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// The stream, fed every way, against the whole-reply parser.
void expect_same_as_whole_reply(ToolCallStream::Format format, const std::string& choice, const std::string& text,
                                bool parallel = true) {
  const StructuredRequest r = request(choice, parallel);
  const ToolCallReply whole = extract_tool_calls(r, text, FinishReason::Stop);
  for (size_t piece = 0; piece <= text.size(); piece += piece < 4 ? 1 : 5) {
    for (uint64_t seed = 0; seed < (piece == 0 ? 8u : 1u); ++seed) {
      const Assembled a = stream(format, r, text, piece, seed);
      EXPECT_EQ(squash(a.content), squash(whole.content.value_or(""))) << "piece " << piece;
      ASSERT_EQ(a.names.size(), whole.tool_calls.size()) << "piece " << piece;
      for (size_t k = 0; k < a.names.size(); ++k) {
        EXPECT_EQ(a.names[k], whole.tool_calls[k]["function"]["name"]);
        EXPECT_EQ(json::parse(a.arguments[k]), json::parse(whole.tool_calls[k]["function"]["arguments"].get<std::string>()))
            << "piece " << piece << ": " << a.arguments[k];
      }
    }
  }
}

TEST(ToolCallStream, RequiredListStreamsEachCall) {
  expect_same_as_whole_reply(ToolCallStream::Format::RequiredList, "required",
                             R"([{"name": "get_weather", "parameters": {"city": "Paris", "days": 3, "units": null}},)"
                             R"( {"name": "get_time", "parameters": {}}])");
  // Braces, brackets, quotes and escapes inside argument strings; nested values; no whitespace.
  expect_same_as_whole_reply(ToolCallStream::Format::RequiredList, "required",
                             R"([{"name":"get_weather","parameters":{"q":"a}b{\"c]","n":[1,{"x":[]}],"t":true}}])");
}

TEST(ToolCallStream, HermesBlocksStreamContentAndCalls) {
  expect_same_as_whole_reply(ToolCallStream::Format::HermesTags, "auto",
                             "Let me check both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                             "{\"city\": \"Paris <b>\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", "
                             "\"arguments\": {}}\n</tool_call>");
  expect_same_as_whole_reply(ToolCallStream::Format::HermesTags, "auto",
                             "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"</tool_call>\"}}\n</tool_call>");
}

// Under `auto` the model may ignore the tags and write another format the whole-reply parser
// knows: the stream holds such a reply back and sends the same calls (and content) at its end.
TEST(ToolCallStream, OtherAutoFormatsGiveTheWholeReplysCalls) {
  for (const std::string text : {
           R"({"name": "get_weather", "arguments": {"city": "Lisbon"}})",          // Llama 3.x
           "\n  [TOOL_CALLS] [{\"name\": \"get_time\", \"arguments\": {}}]",  // Mistral
           "```tool_code\nget_weather(city='Oslo')\n```",                          // Gemma
           "Checking.\n```tool_code\nget_time()\n```\nDone.",                       // Gemma after text
           "get_weather('Rome')",                                                    // Python call only
           "```json\n{\n  \"name\": \"get_time\",\n  \"arguments\": {}\n}\n```",         // Qwen2.5-Coder
       }) {
    expect_same_as_whole_reply(ToolCallStream::Format::HermesTags, "auto", text);
  }
  // Held the same way but not calls: content, exactly as written.
  for (const std::string text : {std::string(R"({"answer": 42})"), std::string("print(x) is Python"),
                                 std::string("```python\nx = 1\n```"), std::string("Hello")}) {
    const Assembled a = stream(ToolCallStream::Format::HermesTags, request("auto"), text, 2);
    EXPECT_EQ(a.content, text);
    EXPECT_TRUE(a.names.empty());
  }
}

TEST(ToolCallStream, TextWithoutCallsIsContentExactly) {
  // "<tool" and "<" that do not become a tag are held back, then sent; whitespace is kept.
  const std::string text = "  a < b, <tool> and <tool_cal or ```tool are not tags\n\n";
  for (size_t piece = 0; piece <= 5; ++piece) {
    const Assembled a = stream(ToolCallStream::Format::HermesTags, request("auto"), text, piece, 1);
    EXPECT_EQ(a.content, text);
    EXPECT_TRUE(a.names.empty());
  }
}

TEST(ToolCallStream, OneCallWhenParallelCallsAreOff) {
  const std::string text =
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
  expect_same_as_whole_reply(ToolCallStream::Format::HermesTags, "auto", text, /*parallel=*/false);
  EXPECT_EQ(stream(ToolCallStream::Format::HermesTags, request("auto", false), text, 3).names,
            std::vector<std::string>{"get_time"});
}

TEST(ToolCallStream, ArgumentsComeAsTheyAreWritten) {
  // A call's id and name go out as soon as the name is complete, before its arguments end.
  const StructuredRequest r = request("required");
  ToolCallStream s(ToolCallStream::Format::RequiredList, r);
  EXPECT_TRUE(s.feed(R"([{"name": "get_wea)").empty());
  std::vector<ToolCallStream::Delta> d = s.feed(R"(ther", "parameters": {"ci)");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].name, "get_weather");
  EXPECT_EQ(d[0].arguments, R"({"ci)");
  d = s.feed(R"(ty": "Rome"}}])");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_TRUE(d[0].id.empty());
  EXPECT_EQ(d[0].arguments, R"(ty": "Rome"})");
  EXPECT_EQ(s.calls(), 1);
}

}  // namespace
}  // namespace kestrel::server
