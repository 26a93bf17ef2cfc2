// The chat template interpreter on small templates, one jinja2 feature at a time. Every expected
// string below is what python jinja2 3.1.6 renders for the same template in transformers 5.24.0's
// sandboxed environment (trim_blocks, lstrip_blocks, loopcontrols, transformers' tojson), with the
// variables of render_case(); they were produced by running that environment, not written by hand.
#include <gtest/gtest.h>

#include <string>

#include "chat/chat_template.h"

namespace kestrel::chat {
namespace {

struct Case {
  const char* name;
  const char* source;
  const char* expected;
};

// messages = system/user/assistant, d = {"a": 1, "b": [1, 2]}, s = "Hello World", tools = none.
std::string render_case(const std::string& source) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array(
      {{{"role", "system"}, {"content", "sys"}}, {{"role", "user"}, {"content", "hi"}},
       {{"role", "assistant"}, {"content", "yo"}}});
  ChatTemplateOptions options;
  options.add_generation_prompt = true;
  options.extra_context = {{"d", {{"a", 1}, {"b", {1, 2}}}}, {"s", "Hello World"}};
  return ChatTemplate::parse(source).render(messages, options);
}

void check_all(const Case* cases, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    SCOPED_TRACE(std::string(cases[i].name) + ": " + cases[i].source);
    try {
      EXPECT_EQ(render_case(cases[i].source), cases[i].expected);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw: " << e.what();
    }
  }
}

const Case kWhitespaceControl[] = {
    {"trim_blocks drops the newline after a block tag", "{% if true %}\nyes\n{% endif %}\nafter", "yes\nafter"},
    {"lstrip_blocks drops indentation before a block tag", "  {% if true %}\n    yes\n  {% endif %}\n  after\n", "    yes\n  after"},
    {"minus strips all whitespace on that side", "a  {%- if true -%}  b  {%- endif -%}  c", "abc"},
    {"variable tags are not lstripped", "x\n    {{ 1 }}\n    {%+ if true %}y{% endif %}\n", "x\n    1\n    y"},
    {"plus disables lstrip", "    {%+ if true %}x{% endif %}", "    x"},
    {"plus disables trim_blocks", "{% if true +%}\nx{% endif %}", "\nx"},
    {"comments strip like blocks", "a\n{# comment #}\nb\n  {#- c2 -#}  \nc", "a\nbc"},
    {"variable minus strips newlines", "a\n\n{{- 'b' -}}\n\nc", "abc"},
    {"one trailing newline is removed", "line1\n\n", "line1\n"},
    {"raw blocks are not interpreted", "{% raw %}{{ not }}{% endraw %}|{%- raw -%}  a  {%- endraw -%}|", "{{ not }}|a|"},
    {"elif and else with trim_blocks", "{% if false %}\n  a\n{% elif true %}\n  b\n{% else %}\n  c\n{% endif %}\n", "  b\n"},
    {"crlf newlines are normalized", "a\x0d""\n{% if true %}\x0d""\nb\x0d""\n{% endif %}\x0d""\nc", "a\nb\nc"},
};

TEST(ChatTemplateInterpreter, WhitespaceControl) { check_all(kWhitespaceControl, std::size(kWhitespaceControl)); }

const Case kForLoops[] = {
    {"loop variables", "{% for x in [1,2,3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", "1032TrueFalse3|2121FalseFalse3|3210FalseTrue3|"},
    {"previtem nextitem cycle", "{% for x in [1,2,3] %}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('a','b') }}|{% endfor %}", "2a|13b|2a|"},
    {"else branch of an empty loop", "{% for x in [] %}a{% else %}empty{% endfor %}", "empty"},
    {"inline if filters before loop counts", "{% for x in [1,2,3,4] if x is even %}{{ loop.index }}/{{ loop.length }}:{{ x }} {% endfor %}", "1/2:2 2/2:4 "},
    {"tuple unpacking", "{% for a, b in [(1,2),(3,4)] %}{{ a }}{{ b }};{% endfor %}", "12;34;"},
    {"dict items", "{% for k, v in {'b':1,'a':2}.items() %}{{ k }}={{ v }};{% endfor %}", "b=1;a=2;"},
    {"iterating a dict gives keys", "{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %}", "ba"},
    {"iterating a string gives characters", "{% for c in 'hé!' %}[{{ c }}]{% endfor %}", "[h][é][!]"},
    {"break and continue", "{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}", "13"},
    {"loop scope does not leak", "{% set c = 0 %}{% for i in [1,2,3] %}{% set c = c + 1 %}{{ c }}{% endfor %}{{ c }}", "1110"},
    {"iteration scope is fresh each time", "{% for i in [1,2] %}{% if loop.first %}{% set q = 5 %}{% endif %}[{{ q }}]{% endfor %}", "[5][]"},
    {"nested loops", "{% for m in messages %}{% for c in m.role[:2] %}{{ c }}{% endfor %}{{ loop.index }},{% endfor %}", "sy1,us2,as3,"},
    {"reverse slice loop", "{% for m in messages[::-1] %}{{ m.role }} {% endfor %}", "assistant user system "},
};

TEST(ChatTemplateInterpreter, ForLoops) { check_all(kForLoops, std::size(kForLoops)); }

const Case kAssignment[] = {
    {"namespace attribute set", "{% set ns = namespace(a=1, found=false) %}{% for x in [1,2] %}{% set ns.a = ns.a + x %}{% set ns.found = true %}{% endfor %}{{ ns.a }} {{ ns.found }}", "4 True"},
    {"namespace without arguments", "{% set ns = namespace() %}{% set ns.items = [1] %}{{ ns.items }} {{ ns.missing is defined }}", "[1] False"},
    {"block set", "{% set x %}abc {{ 1 }}{% endset %}[{{ x }}]", "[abc 1]"},
    {"block set with filter", "{% set x | upper %}abc{% endset %}{{ x }}", "ABC"},
    {"tuple assignment", "{% set a, b = 1, 2 %}{{ a }}{{ b }}", "12"},
    {"reassigning a variable", "{% set messages = messages[1:] %}{{ messages|length }}", "2"},
    {"with block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", "3[]"},
};

TEST(ChatTemplateInterpreter, Assignment) { check_all(kAssignment, std::size(kAssignment)); }

const Case kMacros[] = {
    {"defaults and keywords", "{% macro m(a, b=2) %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(1, b=3) }}{{ m(a=5) }}", "[12][13][52]"},
    {"call block with caller", "{% macro m(a) %}<{{ caller() }}{{ a }}>{% endmacro %}{% call m(1) %}body{% endcall %}", "<body1>"},
    {"caller with arguments", "{% macro m() %}{{ caller(7) }}{% endmacro %}{% call(x) m() %}got {{ x }}{% endcall %}", "got 7"},
    {"recursive macro", "{% macro f(n) %}{{ n }}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}", "3210"},
    {"varargs and kwargs", "{% macro f(x) %}{{ x }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, y=3) }}", "1(2,){'y': 3}"},
    {"missing parameter is undefined", "{% macro f(a, b) %}[{{ b }}]{{ b is defined }}{% endmacro %}{{ f(1) }}", "[]False"},
    {"macro sees template variables", "{% set g = 'G' %}{% macro f() %}{{ g }}{{ messages|length }}{% endmacro %}{{ f() }}", "G3"},
    {"filter block", "{% filter upper %}abc{{ 'd' }}{% endfilter %}", "ABCD"},
    {"generation block renders its body", "{% for m in messages %}{% generation %}[{{ m.role }}]{% endgeneration %}{% endfor %}", "[system][user][assistant]"},
};

TEST(ChatTemplateInterpreter, Macros) { check_all(kMacros, std::size(kMacros)); }

const Case kFilters[] = {
    {"string case filters", "{{ 'hello wORLD'|upper }} {{ 'HeLLo'|lower }} {{ 'hello-world foo(bar'|title }} {{ 'hELLO'|capitalize }}", "HELLO WORLD hello Hello-World Foo(Bar Hello"},
    {"trim", "[{{ '  x \n'|trim }}] [{{ 'xxaxx'|trim('x') }}] [{{ '　x '|trim }}]", "[x] [a] [x]"},
    {"replace", "{{ 'a-b-c'|replace('-', '+') }} {{ 'a-b-c'|replace('-', '', 1) }}", "a+b+c ab-c"},
    {"default", "{{ y|default('d') }} {{ none|default('d') }} {{ none|default('d', true) }} {{ ''|d('e', true) }} {{ s|d('x') }}", "d None d e Hello World"},
    {"length and count", "{{ 'héllo'|length }} {{ messages|length }} {{ d|count }} {{ y|length }}", "5 3 2 0"},
    {"first and last", "{{ [1,2,3]|first }} {{ [1,2,3]|last }} {{ 'abc'|first }} [{{ []|first }}]", "1 3 a []"},
    {"join", "{{ [1,2,3]|join(', ') }} {{ [1,none,'x']|join }} {{ messages|join('|', attribute='role') }}", "1, 2, 3 1Nonex system|user|assistant"},
    {"list and items", "{{ 'ab'|list }} {{ d|list }} {{ d|items|list }}", "['a', 'b'] ['a', 'b'] [('a', 1), ('b', [1, 2])]"},
    {"dictsort", "{{ {'b':1,'A':2}|dictsort }} {{ {'b':1,'a':2}|dictsort(by='value', reverse=true) }}", "[('A', 2), ('b', 1)] [('a', 2), ('b', 1)]"},
    {"sort", "{{ [3,1,2]|sort }} {{ ['b','A','c']|sort }} {{ ['b','A','c']|sort(reverse=true) }} {{ messages|sort(attribute='role')|map(attribute='role')|list }}", "[1, 2, 3] ['A', 'b', 'c'] ['c', 'b', 'A'] ['assistant', 'system', 'user']"},
    {"unique and reverse", "{{ [1,2,1,'A','a']|unique|list }} {{ [1,2,3]|reverse|list }} {{ 'abc'|reverse }}", "[1, 2, 'A'] [3, 2, 1] cba"},
    {"map", "{{ ['a','b']|map('upper')|list }} {{ messages|map(attribute='role')|list }} {{ [{'a':1},{'b':2}]|map(attribute='a', default=0)|list }}", "['A', 'B'] ['system', 'user', 'assistant'] [1, 0]"},
    {"select and reject", "{{ [1,2,3,4]|select('odd')|list }} {{ [1,2,3]|reject('equalto', 2)|list }} {{ [0,1,'',none,'x']|select|list }}", "[1, 3] [1, 3] [1, 'x']"},
    {"selectattr and rejectattr", "{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ messages|rejectattr('role', 'in', ['system', 'user'])|list }}", "['hi'] [{'role': 'assistant', 'content': 'yo'}]"},
    {"int and float", "{{ '42'|int }} {{ '4.5'|int }} {{ 'x'|int }} {{ 4.7|int }} {{ '3'|float }} {{ true|int }} {{ '0x1A'|int(0, 16) }} {{ 'x'|int(-1) }}", "42 4 0 4 3.0 1 26 -1"},
    {"round and abs", "{{ 1.5|round }} {{ 2.5|round }} {{ 1.55|round(1) }} {{ 3.7|round(method='floor') }} {{ -1|abs }} {{ -1.5|abs }}", "2.0 2.0 1.6 3.0 1 1.5"},
    {"string", "{{ 1|string }} {{ none|string }} {{ [1, 'a']|string }} {{ (1|string) ~ 'x' }}", "1 None [1, 'a'] 1x"},
    {"indent", "{{ 'a\nb'|indent(2) }}|{{ 'a\nb\n\nc'|indent(2, true) }}|{{ 'a\n\nb'|indent(2, blank=true) }}|{{ 'x\ny'|indent('> ') }}", "a\n  b|  a\n  b\n\n  c|a\n  \n  b|x\n> y"},
    {"tojson", "{{ {'a': [1, {'b': 'c'}], 'd': none, 'e': true, 'f': 1.5, 'g': 'é\"\n'}|tojson }}", "{\"a\": [1, {\"b\": \"c\"}], \"d\": null, \"e\": true, \"f\": 1.5, \"g\": \"é\\\"\\n\"}"},
    {"tojson indent", "{{ {'a': [1, {'b': 'c'}], 'e': [], 'f': {}}|tojson(indent=2) }}", "{\n  \"a\": [\n    1,\n    {\n      \"b\": \"c\"\n    }\n  ],\n  \"e\": [],\n  \"f\": {}\n}"},
    {"tojson options", "{{ {'b': 1, 'a': 2}|tojson(sort_keys=true, separators=(',', ':')) }} {{ 'é😀'|tojson(ensure_ascii=true) }}", "{\"a\":2,\"b\":1} \"\\u00e9\\ud83d\\ude00\""},
    {"safe and escape", "{{ '<a>'|escape }} {{ '<a>'|safe }} {{ ('<b>'|safe) + '<' }}", "&lt;a&gt; <a> <b>&lt;"},
    {"min max sum", "{{ [1, 5, 3]|max }} {{ ['b', 'A']|min }} {{ [1, 2, 3]|sum }} {{ [{'n': 2}, {'n': 3}]|sum(attribute='n') }}", "5 A 6 5"},
    {"format filter", "{{ '%s=%d %5.2f|%-4s|%r'|format('a', 3, 3.14159, 'x', 'q') }}", "a=3  3.14|x   |'q'"},
    {"chained filters", "{{ messages|map(attribute='content')|map('upper')|join(',')|replace('S', 's') }}", "sYs,HI,YO"},
};

TEST(ChatTemplateInterpreter, Filters) { check_all(kFilters, std::size(kFilters)); }

const Case kTests[] = {
    {"defined and undefined", "{{ y is defined }} {{ y is undefined }} {{ s is defined }} {{ d.a is defined }} {{ d.z is defined }}", "False True True True False"},
    {"type tests", "{{ s is string }} {{ d is mapping }} {{ d.b is sequence }} {{ d.b is iterable }} {{ 1 is number }} {{ 1.0 is float }} {{ 1 is integer }} {{ true is boolean }} {{ none is none }}", "True True True True True True True True True"},
    {"true and false are identity tests", "{{ true is true }} {{ 1 is true }} {{ false is false }} {{ '' is false }} {{ 0 is false }}", "True False True False False"},
    {"comparison tests", "{{ 2 is equalto 2 }} {{ 2 is eq 3 }} {{ 2 is gt 1 }} {{ 'a' is in 'abc' }} {{ 10 is divisibleby 5 }} {{ 3 is odd }} {{ 4 is even }}", "True False True True True True True"},
    {"negated tests", "{{ none is not none }} {{ y is not defined }} {{ s is not string }}", "False True False"},
    {"case tests", "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'aB' is lower }}", "True True False"},
    {"undefined is iterable and sequence", "{{ y is iterable }} {{ y is sequence }} {{ y is mapping }} {{ y is string }}", "True True False False"},
};

TEST(ChatTemplateInterpreter, Tests) { check_all(kTests, std::size(kTests)); }

const Case kOperators[] = {
    {"arithmetic", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 / 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 4 / 2 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 ** -1 }}", "3 -4 3.5 2 1024 2.0 3.0 0.5 0.5"},
    {"precedence", "{{ -2 ** 2 }} {{ 2 * 3 + 4 * 5 }} {{ 10 - 2 - 3 }} {{ not true or true }} {{ (1 + 2) ~ 3 }}", "4 26 5 True 33"},
    {"chained comparisons", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 1 == true }} {{ [1,2] == [1,2] }} {{ 'a' < 'b' }}", "True False True True True True"},
    {"membership", "{{ 'ab' in 'xabc' }} {{ 1 in [1,2] }} {{ 'a' in {'a':1} }} {{ 'z' not in 'abc' }} {{ 'a' in y }}", "True True True True False"},
    {"and or return operands", "{{ true and 'x' }} {{ 0 or '' or 'z' }} {{ none or 'n' }} {{ s and 1 }}", "x z n 1"},
    {"string and list operators", "{{ [1,2] + [3] }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ 'a' ~ 1 ~ none ~ [1] }}", "[1, 2, 3] ababab [1, 1] a1None[1]"},
    {"conditional expression", "[{{ 'x' if false }}] {{ 'x' if true else 'y' }} {{ 'a' if y is defined else 'b' }}", "[] x b"},
    {"literals", "{{ 1_000 + 0x10 + 0o10 + 0b11 }} {{ 1e3 }} {{ \"a\" 'b' }} {{ True }} {{ None }} {{ (1,) }} {{ {'k': [1, (2, 3)]} }}", "1027 1000.0 ab True None (1,) {'k': [1, (2, 3)]}"},
    {"string escapes", "{{ 'tab\\there' }}|{{ 'quote\\'s' }}|{{ \"\\u00e9\\x41\" }}|{{ 'back\\\\slash' }}", "tab\there|quote's|éA|back\\slash"},
};

TEST(ChatTemplateInterpreter, Operators) { check_all(kOperators, std::size(kOperators)); }

const Case kValuesPrintLikePython[] = {
    {"printing values like Python", "{{ none }}|{{ true }}|{{ 1.0 }}|{{ 1e20 }}|{{ [1,'a',none,1.5] }}|{{ {'a':1,'b':'x'} }}|{{ (1,2) }}|{{ 1e-5 }}", "None|True|1.0|1e+20|[1, 'a', None, 1.5]|{'a': 1, 'b': 'x'}|(1, 2)|1e-05"},
    {"float repr", "{{ 0.1 + 0.2 }} {{ 1/3 }} {{ 100.0 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ -0.0 }} {{ 2.5e-7 }}", "0.30000000000000004 0.3333333333333333 100.0 1e+16 1000000000000000.0 0.0001 -0.0 2.5e-07"},
    {"string repr inside containers", "{{ ['it\\'s', \"q\\\"\", '\\n\\t', 'é'] }}", "[\"it's\", 'q\"', '\\n\\t', 'é']"},
    {"undefined prints empty", "[{{ y }}][{{ y|trim }}][{{ y|upper }}][{{ y|list }}][{{ y|join }}][{{ d.z }}][{{ messages[9] }}]", "[][][][[]][][][]"},
    {"undefined comparisons", "{{ y == z }} {{ y == none }} {{ y != 1 }} {{ 'a' in y }}", "True False True False"},
    {"message access styles", "{{ messages[0].role }} {{ messages[0]['content'] }} {{ messages[-1].content }} {{ messages.0.role }}", "system sys yo system"},
};

TEST(ChatTemplateInterpreter, ValuesPrintLikePython) { check_all(kValuesPrintLikePython, std::size(kValuesPrintLikePython)); }

const Case kSlicing[] = {
    {"list slices", "{{ [1,2,3][1:] }} {{ [1,2,3][:-1] }} {{ [1,2,3][::2] }} {{ [1,2,3][5:] }} {{ [1,2,3,4,5][4:0:-2] }} {{ [1,2,3][-1] }}", "[2, 3] [1, 2] [1, 3] [] [5, 3] 3"},
    {"string slices", "{{ 'hello'[-3:] }} {{ 'abc'[::-1] }} {{ 'héllo'[1:3] }} {{ 'abc'[-10:10] }} {{ 'abc'[1] }}", "llo cba él abc b"},
};

TEST(ChatTemplateInterpreter, Slicing) { check_all(kSlicing, std::size(kSlicing)); }

const Case kMethodsAndGlobals[] = {
    {"strip family", "[{{ '  x\n'.strip() }}] [{{ 'xxaxx'.strip('x') }}] [{{ '  x '.lstrip() }}] [{{ '  x '.rstrip() }}] [{{ '\n\nx'.lstrip('\n') }}]", "[x] [a] [x ] [  x] [x]"},
    {"split and rsplit", "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(None, 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ ' a b c '.rsplit(None, 1) }}", "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c'] ['a,b', 'c'] [' a b', 'c']"},
    {"split on think tags", "{{ 'x<think>r</think>\n\nanswer'.split('</think>')[-1].lstrip('\n') }}", "answer"},
    {"startswith endswith", "{{ s.startswith('Hell') }} {{ s.endswith('x') }} {{ s.startswith(('x', 'H')) }}", "True False True"},
    {"find count replace", "{{ s.find('o') }} {{ s.rfind('o') }} {{ s.find('z') }} {{ s.count('l') }} {{ s.replace('l', 'L', 2) }} {{ 'héllo'.find('l') }}", "4 7 -1 3 HeLLo World 2"},
    {"case methods", "{{ s.upper() }} {{ s.lower() }} {{ 'hello wORLD'.title() }} {{ \"they're\".title() }} {{ 'hELLO'.capitalize() }}", "HELLO WORLD hello world Hello World They'Re Hello"},
    {"format and join", "{{ 'a{}c{}'.format(1, 'x') }} {{ '{0}-{0}'.format('r') }} {{ '-'.join(['a', 'b']) }}", "a1cx r-r a-b"},
    {"dict methods", "{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 2) }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }}", "1 None 2 ['a', 'b'] [1, [1, 2]] [('a', 1), ('b', [1, 2])]"},
    {"attribute versus item lookup", "{{ {'items': 1}['items'] }} {{ {'get': 2}.get('get') }} {{ d['a'] }} {{ d.a }}", "1 2 1 1"},
    {"globals", "{{ range(3)|list }} {{ range(1,7,2)|list }} {{ range(5,0,-2)|list }} {{ dict(a=1) }} {{ namespace(x=1).x }}", "[0, 1, 2] [1, 3, 5] [5, 3, 1] {'a': 1} 1"},
};

TEST(ChatTemplateInterpreter, MethodsAndGlobals) { check_all(kMethodsAndGlobals, std::size(kMethodsAndGlobals)); }

const Case kIteratorsAreOneShot[] = {
    {"select and map give one-shot iterators", "{% set g = messages|map(attribute='role') %}{{ g|list }} {{ g|list }}", "['system', 'user', 'assistant'] []"},
    {"an iterator is truthy even when empty", "{% if messages|selectattr('role', 'equalto', 'nobody') %}truthy{% endif %} {{ (messages|selectattr('role', 'equalto', 'nobody'))|list|length }}", "truthy 0"},
    {"iterators are not sequences", "{{ messages|select is sequence }} {{ messages|select is iterable }} {{ messages|reject|first is defined }}", "False True False"},
    {"filters on a falsy value yield nothing", "{{ none|map('upper')|list }} {{ none|selectattr('x')|list }} {{ ''|select|list }}", "[] [] []"},
    {"membership consumes an iterator", "{% set g = [1, 2, 3]|select %}{{ 2 in g }} {{ g|list }}", "True [3]"},
};

TEST(ChatTemplateInterpreter, IteratorsAreOneShot) { check_all(kIteratorsAreOneShot, std::size(kIteratorsAreOneShot)); }

}  // namespace
}  // namespace kestrel::chat
