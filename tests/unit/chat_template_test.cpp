// Chat templates (chat/chat_template.h): real models' templates against the golden renderings
// that transformers produced (tests/data/chat_templates/*.expected.json, made by
// scripts/gen_chat_fixtures.py), error reporting, and the built-in named templates.
#include "chat/chat_template.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "test_paths.h"

namespace kestrel::chat {
namespace {

using nlohmann::ordered_json;

std::tm parse_time(const std::string& text) {
  std::tm tm{};
  int year = 0, month = 0;
  EXPECT_EQ(std::sscanf(text.c_str(), "%d-%d-%dT%d:%d:%d", &year, &month, &tm.tm_mday, &tm.tm_hour,
                        &tm.tm_min, &tm.tm_sec),
            6);
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  std::tm normalized = tm;
  std::time_t t = timegm(&normalized);  // fills in the weekday and day of the year
  gmtime_r(&t, &normalized);
  return normalized;
}

ChatTemplateOptions fixture_options(const ordered_json& fixture, const ordered_json& c) {
  ChatTemplateOptions options;
  if (!fixture["bos_token"].is_null()) options.bos_token = fixture["bos_token"].get<std::string>();
  if (!fixture["eos_token"].is_null()) options.eos_token = fixture["eos_token"].get<std::string>();
  options.now = parse_time(fixture["now"].get<std::string>());
  options.add_generation_prompt = c["add_generation_prompt"].get<bool>();
  options.tools = c["tools"];
  options.extra_context = c["extra_context"];
  return options;
}

std::vector<std::string> fixture_names() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(test::test_data_path("chat_templates"))) {
    std::string file = entry.path().filename().string();
    const std::string suffix = ".expected.json";
    if (file.size() > suffix.size() && file.compare(file.size() - suffix.size(), suffix.size(), suffix) == 0)
      names.push_back(file.substr(0, file.size() - suffix.size()));
  }
  std::sort(names.begin(), names.end());
  return names;
}

ChatTemplate load_template(const std::string& name) {
  return ChatTemplate::parse(test::read_file(test::test_data_path("chat_templates/" + name + ".jinja")));
}

// Renders every case of one fixture file and compares with transformers' result.
void check_fixture(const std::string& name) {
  ordered_json fixture =
      ordered_json::parse(test::read_file(test::test_data_path("chat_templates/" + name + ".expected.json")));
  ChatTemplate tmpl = load_template(name);
  ASSERT_FALSE(fixture["cases"].empty());
  for (const auto& c : fixture["cases"]) {
    SCOPED_TRACE(name + " / " + c["name"].get<std::string>());
    ChatTemplateOptions options = fixture_options(fixture, c);
    if (c.contains("expected")) {
      try {
        EXPECT_EQ(tmpl.render(c["messages"], options), c["expected"].get<std::string>());
      } catch (const std::exception& e) {
        ADD_FAILURE() << "threw: " << e.what();
      }
      continue;
    }
    const std::string type = c["error_type"].get<std::string>();
    const std::string message = c["error"].get<std::string>();
    try {
      std::string out = tmpl.render(c["messages"], options);
      ADD_FAILURE() << "expected " << type << " '" << message << "', rendered: " << out;
    } catch (const ChatTemplateError& e) {
      if (type == "TemplateError") {
        // raise_exception(message): transformers reports exactly the template's message.
        EXPECT_EQ(e.kind(), ChatTemplateError::Kind::Raised) << e.what();
        EXPECT_EQ(std::string(e.what()), message);
      } else {
        // A failure inside the template (jinja2's UndefinedError, Python's TypeError, ...): the
        // same message, plus its position.
        EXPECT_EQ(e.kind(), ChatTemplateError::Kind::Runtime) << e.what();
        EXPECT_EQ(e.detail(), message) << type;
      }
    } catch (const Error& e) {
      // Checks transformers makes before rendering (e.g. an empty conversation).
      EXPECT_EQ(type, "ValueError") << e.what();
      EXPECT_EQ(std::string(e.what()), message);
    }
  }
}

TEST(ChatTemplateFixtures, RequiredModelsArePresent) {
  std::vector<std::string> names = fixture_names();
  for (const char* required :
       {"meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.2-3B-Instruct", "Qwen-Qwen2.5-7B-Instruct",
        "Qwen-Qwen3-0.6B", "mistralai-Mistral-Nemo-Instruct-2407",
        "mistralai-Mistral-Small-3.2-24B-Instruct-2506", "google-gemma-3-4b-it"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), required), names.end()) << required;
  }
}

TEST(ChatTemplateFixtures, MatchTransformersByteForByte) {
  for (const std::string& name : fixture_names()) check_fixture(name);
}

TEST(ChatTemplateFixtures, PlainJsonOverloadRendersTheSame) {
  ChatTemplate tmpl = load_template("Qwen-Qwen3-0.6B");
  nlohmann::json messages = nlohmann::json::array({{{"role", "user"}, {"content", "hi"}}});
  ChatTemplateOptions options;
  options.eos_token = "<|im_end|>";
  options.extra_context = {{"enable_thinking", false}};
  EXPECT_EQ(tmpl.render(messages, options),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

// --- errors -------------------------------------------------------------------------------------

template <typename F>
ChatTemplateError capture(F&& f) {
  try {
    f();
  } catch (const ChatTemplateError& e) {
    return e;
  }
  ADD_FAILURE() << "no ChatTemplateError thrown";
  return ChatTemplateError(ChatTemplateError::Kind::Runtime, 0, 0, "none");
}

std::string render_simple(const std::string& source) {
  ordered_json messages = ordered_json::array({{{"role", "user"}, {"content", "hi"}}});
  return ChatTemplate::parse(source).render(messages);
}

TEST(ChatTemplateErrors, SyntaxErrorsGiveLineAndColumn) {
  auto e = capture([] { ChatTemplate::parse("line one\n{% if true %}\n  {{ 1 + }}\n{% endif %}"); });
  EXPECT_EQ(e.kind(), ChatTemplateError::Kind::Syntax);
  EXPECT_EQ(e.line(), 3);
  EXPECT_EQ(e.column(), 10);
  EXPECT_NE(std::string(e.what()).find("line 3, column 10"), std::string::npos) << e.what();

  e = capture([] { ChatTemplate::parse("{% for m in messages %}\n{{ m }}\n"); });
  EXPECT_NE(e.detail().find("'endfor'"), std::string::npos) << e.what();
  e = capture([] { ChatTemplate::parse("{% frobnicate %}"); });
  EXPECT_EQ(e.detail(), "Encountered unknown tag 'frobnicate'.");
  e = capture([] { ChatTemplate::parse("ok\n{# never closed"); });
  EXPECT_EQ(e.line(), 2);
  e = capture([] { ChatTemplate::parse("{{ 'unterminated }}"); });
  EXPECT_EQ(e.kind(), ChatTemplateError::Kind::Syntax);
  e = capture([] { ChatTemplate::parse("{% break %}"); });
  EXPECT_EQ(e.kind(), ChatTemplateError::Kind::Syntax);
  e = capture([] { ChatTemplate::parse("{{ (1 }}"); });
  EXPECT_EQ(e.kind(), ChatTemplateError::Kind::Syntax);
}

TEST(ChatTemplateErrors, RuntimeErrorsGiveLineAndJinjaMessage) {
  // jinja2: UndefinedError: 'dict object' has no attribute 'nope'
  auto e = capture([] { render_simple("a\nb {{ messages[0].nope.deeper }}"); });
  EXPECT_EQ(e.kind(), ChatTemplateError::Kind::Runtime);
  EXPECT_EQ(e.line(), 2);
  EXPECT_EQ(e.detail(), "'dict object' has no attribute 'nope'");
  // jinja2: UndefinedError: 'missing' is undefined
  e = capture([] { render_simple("{{ missing + 1 }}"); });
  EXPECT_EQ(e.detail(), "'missing' is undefined");
  // jinja2: TypeError: can only concatenate str (not "int") to str
  e = capture([] { render_simple("{{ 'a' + 1 }}"); });
  EXPECT_EQ(e.detail(), "can only concatenate str (not \"int\") to str");
  // jinja2: SecurityError: access to attribute 'append' of 'list' object is unsafe.
  e = capture([] { render_simple("{{ messages.append(1) }}"); });
  EXPECT_EQ(e.detail(), "access to attribute 'append' of 'list' object is unsafe.");
  // jinja2: TypeError: 'NoneType' object is not iterable
  e = capture([] { render_simple("\n\n{% for x in none %}{% endfor %}"); });
  EXPECT_EQ(e.line(), 3);
  EXPECT_EQ(e.detail(), "'NoneType' object is not iterable");
  e = capture([] { render_simple("{{ 1 // 0 }}"); });
  EXPECT_EQ(e.kind(), ChatTemplateError::Kind::Runtime);
  // As in jinja2, an unknown filter or test fails when the template is parsed, unless it is inside
  // an if statement or a conditional expression: then it fails only when it is evaluated.
  e = capture([] { ChatTemplate::parse("{{ messages|frobnicate }}"); });
  EXPECT_EQ(e.kind(), ChatTemplateError::Kind::Syntax);
  EXPECT_EQ(e.detail(), "No filter named 'frobnicate'.");
  e = capture(
      [] { ChatTemplate::parse("{% if 1 %}{% for m in messages %}{{ m is frob }}{% endfor %}{% endif %}"); });
  EXPECT_EQ(e.detail(), "No test named 'frob'.");
  EXPECT_EQ(render_simple("{% if false %}{{ x|frobnicate }}{% endif %}ok"), "ok");
  e = capture([] { render_simple("{% if true %}{{ x|frobnicate }}{% endif %}"); });
  EXPECT_EQ(e.kind(), ChatTemplateError::Kind::Runtime);
  EXPECT_EQ(e.detail(), "No filter named 'frobnicate' found.");
  e = capture([] { render_simple("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"); });
  EXPECT_EQ(e.kind(), ChatTemplateError::Kind::Runtime);
  e = capture([] { render_simple("{% set ns = namespace(_x=1) %}"); });
  EXPECT_NE(e.detail().find("underscore-prefixed"), std::string::npos);
}

TEST(ChatTemplateErrors, HostileTemplatesHitLimitsNotTheStack) {
  EXPECT_EQ(capture([] {
              ChatTemplate::parse("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}");
            }).kind(),
            ChatTemplateError::Kind::Syntax);
  std::string long_chain = "{{ 1";
  for (int i = 0; i < 5000; ++i) long_chain += " + 1";
  EXPECT_EQ(capture([&] { ChatTemplate::parse(long_chain + " }}"); }).kind(),
            ChatTemplateError::Kind::Syntax);
  std::string nested;
  for (int i = 0; i < 1000; ++i) nested += "{% if true %}";
  EXPECT_EQ(capture([&] { ChatTemplate::parse(nested); }).kind(), ChatTemplateError::Kind::Syntax);
  auto e = capture([] { render_simple("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"); });
  EXPECT_EQ(e.detail(), "maximum macro recursion depth exceeded");
  e = capture([] { render_simple("{{ range(1000000)|length }}"); });
  EXPECT_EQ(e.detail(), "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
}

TEST(ChatTemplateErrors, RaiseExceptionCarriesTheTemplatesMessage) {
  auto e = capture(
      [] { render_simple("ok\n  {{ raise_exception('Roles must alternate: ' ~ messages|length) }}"); });
  EXPECT_EQ(e.kind(), ChatTemplateError::Kind::Raised);
  EXPECT_EQ(std::string(e.what()), "Roles must alternate: 1");
  EXPECT_EQ(e.line(), 2);
  // Raised from inside a macro called in a loop.
  e = capture([] {
    render_simple(
        "{% macro check(m) %}{{ raise_exception('bad ' + m.role) }}{% endmacro %}"
        "{% for m in messages %}{{ check(m) }}{% endfor %}");
  });
  EXPECT_EQ(std::string(e.what()), "bad user");
}

TEST(ChatTemplateErrors, InputsAreChecked) {
  ChatTemplate tmpl = ChatTemplate::parse("{{ messages|length }}");
  EXPECT_THROW(tmpl.render(ordered_json::array()), Error);
  EXPECT_THROW(tmpl.render(ordered_json::array({"not an object"})), Error);
  EXPECT_THROW(tmpl.render(ordered_json::object()), Error);
  ChatTemplateOptions options;
  options.extra_context = {{"messages", 1}};
  EXPECT_THROW(tmpl.render(ordered_json::array({{{"role", "user"}}}), options), Error);
}

// --- render inputs --------------------------------------------------------------------------------

TEST(ChatTemplateRender, VariablesMatchTransformers) {
  ChatTemplate tmpl = ChatTemplate::parse(
      "{{ bos_token is defined }} {{ eos_token }} {{ tools }} {{ documents }} {{ add_generation_prompt }} "
      "{{ messages }} {{ flag }}");
  ordered_json messages =
      ordered_json::array({{{"role", "user"}, {"content", "hi"}, {"name", nullptr}},
                           {{"role", "assistant"}, {"content", "yo"}, {"reasoning", "because"}}});
  ChatTemplateOptions options;
  options.eos_token = "</s>";
  options.add_generation_prompt = false;
  options.extra_context = {{"flag", true}};
  // transformers 5.24.0 renders the same variables like this: null keys dropped, reasoning aliased.
  EXPECT_EQ(tmpl.render(messages, options),
            "False </s> None None False [{'role': 'user', 'content': 'hi'}, {'thinking': 'because', 'role': "
            "'assistant', 'content': 'yo', 'reasoning': 'because', 'reasoning_content': 'because'}] True");
}

TEST(ChatTemplateRender, StrftimeNowUsesTheGivenTime) {
  ChatTemplateOptions options;
  std::tm tm{};
  tm.tm_year = 2025 - 1900;
  tm.tm_mon = 0;
  tm.tm_mday = 2;
  tm.tm_wday = 4;
  options.now = tm;
  ChatTemplate tmpl = ChatTemplate::parse("{{ strftime_now('%d %b %Y, %A') }}");
  EXPECT_EQ(tmpl.render(ordered_json::array({{{"role", "user"}}}), options), "02 Jan 2025, Thursday");
  // Without a fixed time it formats the current local time.
  EXPECT_EQ(ChatTemplate::parse("{{ strftime_now('%Y')|length }}")
                .render(ordered_json::array({{{"role", "user"}}})),
            "4");
}

// --- built-in templates -----------------------------------------------------------------------------

ordered_json simple_conversation(bool with_system) {
  ordered_json messages = ordered_json::array();
  if (with_system) messages.push_back({{"role", "system"}, {"content", "You are terse."}});
  messages.push_back({{"role", "user"}, {"content", "Hello!"}});
  messages.push_back({{"role", "assistant"}, {"content", " Hi. "}});
  messages.push_back({{"role", "user"}, {"content", "What is 2+2?"}});
  return messages;
}

TEST(BuiltinChatTemplates, NamesResolve) {
  std::vector<std::string> names = builtin_chat_template_names();
  for (const char* expected : {"chatml", "llama3", "llama2", "mistral", "gemma", "qwen2", "qwen2.5"})
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
  for (const std::string& name : names) {
    auto source = builtin_chat_template(name);
    ASSERT_TRUE(source.has_value()) << name;
    EXPECT_NO_THROW(ChatTemplate::parse(*source)) << name;
  }
  EXPECT_FALSE(builtin_chat_template("no-such-format").has_value());
}

TEST(BuiltinChatTemplates, ChatMLIsTheWellKnownFormat) {
  ChatTemplate tmpl = ChatTemplate::parse(*builtin_chat_template("chatml"));
  EXPECT_EQ(tmpl.render(simple_conversation(true)),
            "<|im_start|>system\nYou are terse.<|im_end|>\n"
            "<|im_start|>user\nHello!<|im_end|>\n"
            "<|im_start|>assistant\n Hi. <|im_end|>\n"
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
  ChatTemplateOptions no_prompt;
  no_prompt.add_generation_prompt = false;
  EXPECT_EQ(tmpl.render(ordered_json::array({{{"role", "user"}, {"content", "x"}}}), no_prompt),
            "<|im_start|>user\nx<|im_end|>\n");
}

// A built-in template must render simple text conversations exactly like the real template it
// stands in for.
void expect_same_as_real(const std::string& builtin, const std::string& real,
                         const ChatTemplateOptions& base) {
  ChatTemplate mine = ChatTemplate::parse(*builtin_chat_template(builtin));
  ChatTemplate theirs = load_template(real);
  for (bool with_system : {true, false}) {
    for (bool prompt : {true, false}) {
      for (size_t length : {1, 2, 3}) {
        ordered_json messages = simple_conversation(with_system);
        while (messages.size() > length + (with_system ? 1 : 0)) messages.erase(messages.size() - 1);
        ChatTemplateOptions options = base;
        options.add_generation_prompt = prompt;
        SCOPED_TRACE(builtin + " vs " + real + ": " + messages.dump() + (prompt ? " +prompt" : ""));
        EXPECT_EQ(mine.render(messages, options), theirs.render(messages, options));
      }
    }
  }
}

TEST(BuiltinChatTemplates, MatchTheRealTemplatesOnSimpleConversations) {
  ChatTemplateOptions llama;
  llama.bos_token = "<|begin_of_text|>";
  llama.eos_token = "<|eot_id|>";
  expect_same_as_real("llama3", "meta-llama-Llama-3.1-8B-Instruct", llama);
  ChatTemplateOptions qwen;
  qwen.eos_token = "<|im_end|>";
  expect_same_as_real("qwen2.5", "Qwen-Qwen2.5-7B-Instruct", qwen);
  ChatTemplateOptions mistral;
  mistral.bos_token = "<s>";
  mistral.eos_token = "</s>";
  expect_same_as_real("mistral", "mistralai-Mistral-Nemo-Instruct-2407", mistral);
  ChatTemplateOptions gemma;
  gemma.bos_token = "<bos>";
  gemma.eos_token = "<eos>";
  expect_same_as_real("gemma", "google-gemma-3-4b-it", gemma);
}

TEST(BuiltinChatTemplates, Llama2AndQwen2Formats) {
  ChatTemplateOptions options;
  options.bos_token = "<s>";
  options.eos_token = "</s>";
  EXPECT_EQ(
      ChatTemplate::parse(*builtin_chat_template("llama2")).render(simple_conversation(true), options),
      "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHello! [/INST] Hi. </s><s>[INST] What is 2+2? [/INST]");
  EXPECT_EQ(ChatTemplate::parse(*builtin_chat_template("qwen2"))
                .render(ordered_json::array({{{"role", "user"}, {"content", "Hey"}}})),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHey<|im_end|>\n"
            "<|im_start|>assistant\n");
  auto e = capture([&] {
    ChatTemplate::parse(*builtin_chat_template("llama2"))
        .render(ordered_json::array(
            {{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}}}));
  });
  EXPECT_EQ(std::string(e.what()), "Conversation roles must alternate user/assistant/user/assistant/...");
}

}  // namespace
}  // namespace kestrel::chat
