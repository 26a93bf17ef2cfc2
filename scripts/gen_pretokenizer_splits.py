#!/usr/bin/env python3
"""Generates tests/data/pretokenizer/llama_cpp_splits.json: how llama.cpp pre-tokenizes test
strings for every tokenizer.ggml.pre value it knows, computed independently of Kestrel.

The expectations come from llama.cpp's own source, not from Kestrel's table: this script reads
src/llama-vocab.cpp of the llama.cpp that llama-cpp-python 0.3.36 vendors, takes

  - each LLAMA_VOCAB_PRE_TYPE_*'s list of regular expressions (llm_tokenizer_bpe's constructor)
    and whether it keeps raw UTF-8 (byte_encode = false), and
  - each tokenizer.ggml.pre name's pre type and the flags set beside it (ignore_merges, add_bos,
    escape_whitespaces), from llama_vocab::impl::load,

then applies each type's expressions in order with Python's `regex` module, the way llama.cpp's
unicode_regex_split does: every expression splits the pieces the previous one produced into its
matches and the unmatched stretches between them (an empty match splits too), and a piece is
matched on its own (so ^, $ and lookarounds see only the piece).

Three expressions are not run as written because llama.cpp does not run them as written either:
unicode.cpp replaces them with hand-written code, and the expression used here is what that code
does (read from unicode.cpp; see CUSTOM below). The other hand-written splitters in unicode.cpp
(GPT-2, Llama 3, Qwen2, Qwen3.5, newline runs) implement their expressions exactly, so those are
run as written.

Run by hand (not in CI):

    cd /tmp && pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36
    tar xzf llama_cpp_python-0.3.36.tar.gz
    python3 -m venv /tmp/pretok-venv && /tmp/pretok-venv/bin/pip install regex==2026.11.19
    /tmp/pretok-venv/bin/python scripts/gen_pretokenizer_splits.py \
        /tmp/llama_cpp_python-0.3.36/vendor/llama.cpp/src/llama-vocab.cpp

tests/unit/pretokenizer_table_test.cpp checks Kestrel's pre-tokenizers against the output.
"""

import json
import os
import re
import sys

import regex

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "data", "pretokenizer", "llama_cpp_splits.json")
VOCAB_INP = os.path.join(HERE, "..", "..", "shared", "models", "llama.cpp-vocab",
                         "ggml-vocab-gpt-2.gguf.inp")

# llama.cpp's unicode_cpt_is_han ranges (not the Unicode Han script), as a class of literal
# characters.
HAN_RANGES = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2EBEF),
              (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]
HAN = "[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in HAN_RANGES) + "]"

CUSTOM = {
    # unicode_regex_split_custom_kimi_k2: Han runs; then Kimi's letter patterns, but its code
    # treats every non-Han letter alike (no upper/lower distinction, no \p{M}) and lower-cases the
    # contraction; then \p{N}{1,3} and the usual punctuation and whitespace alternatives.
    r"\p{Han}+": (HAN + r"+|[^\r\n\p{L}\p{N}]?(?:(?!" + HAN + r")\p{L})+"
                  r"(?:'[sStTmMdD]|'[rR][eE]|'[vV][eE]|'[lL][lL])?"
                  r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
    # unicode_regex_split_custom_afmoe: each run of \p{N} is cut into groups of three counted from
    # its end (the first group takes the remainder).
    r"\p{AFMoE_digits}": r"\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N}))",
    # Tiny Aya's "\d{1,3}(?=(?:\d{3})*\b)" is sent to the same AFMoE code.
    r"\d{1,3}(?=(?:\d{3})*\b)": r"\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N}))",
}

# Strings beyond llama.cpp's own test strings: contractions in both cases, digit runs of every
# length mod 3 and non-ASCII digits, CJK/kana/hangul, combining marks, case changes inside words,
# the punctuation sets of Poro/Bloom and DeepSeek, Chameleon's sentinels, CR/LF and space runs.
EXTRA_STRINGS = [
    "I'M HERE, you'RE there; they'Ll go. We'VE 'S 'd",
    "1 12 123 1234 12345 123456 1234567 x9y 3.14159 ١٢٣٤ ４５６",
    "中文字符和日本語のひらがなカタカナ、한국어 텍스트！",
    "e\u0301te\u0301 cafe\u0301 na\u0308ive\u0308 हिन्दी ภาษาไทย",
    "HelloWorld camelCaseWord XMLHttpRequest ÀÉÎõüÑ ǅungla",
    "a\r\nb\n\n\nc\r\r  \n\t\t end  ",
    "...!!! ??? ,,, $+<=>^`|~ (x) [y] {z} … 。，、।۔،",
    "<sentinel:12><sentinel:3> IMGIMGABCZ IMGIMGZ tail",
    "def f(x):\n    return x**2  # comment\n\tpass\n",
    "https://example.com/a/b?c=1&d=2 user@mail.org",
    "µ Ωmega ℃ ｆｕｌｌｗｉｄｔｈ ＡＢＣ！ ‘quoted’ “dq”",
    "emoji 🦙🚀 mixed🙂text 👍🏽",
    "    four spaces then text",
    "Ελληνικά Русский текст Türkçe'nin",
]


def unescape_cpp(body):
    """The value of a C++ narrow string literal's body (UTF-8 source)."""
    out = []
    i = 0
    simple = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "'": "'", "?": "?",
              "0": "\0"}
    while i < len(body):
        c = body[i]
        if c == "\\":
            nxt = body[i + 1]
            if nxt not in simple:
                raise ValueError(f"unsupported escape \\{nxt} in {body!r}")
            out.append(simple[nxt])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


STRING_LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')


def strip_comments(code):
    result = []
    for line in code.split("\n"):
        # A // inside a string literal (none of llama.cpp's expressions has one) would break this.
        in_string = False
        cut = len(line)
        i = 0
        while i < len(line):
            c = line[i]
            if c == "\\" and in_string:
                i += 2
                continue
            if c == '"':
                in_string = not in_string
            elif not in_string and line.startswith("//", i):
                cut = i
                break
            i += 1
        result.append(line[:cut])
    return "\n".join(result)


def split_top_level_commas(code):
    parts, current, in_string, i = [], [], False, 0
    while i < len(code):
        c = code[i]
        if in_string and c == "\\":
            current.append(code[i:i + 2])
            i += 2
            continue
        if c == '"':
            in_string = not in_string
        if c == "," and not in_string:
            parts.append("".join(current))
            current = []
        else:
            current.append(c)
        i += 1
    parts.append("".join(current))
    return parts


def parse_pre_types(source):
    """{PRE_TYPE: {"patterns": [...], "raw_utf8": bool}} from llm_tokenizer_bpe's constructor."""
    start = source.index("struct llm_tokenizer_bpe : llm_tokenizer {")
    end = source.index("std::vector<std::string> regex_exprs;", start)
    body = strip_comments(source[start:end])
    types = {}
    # Each group: one or more case labels (or default:), then the statements up to break;
    for group in re.finditer(r"((?:\s*(?:case LLAMA_VOCAB_PRE_TYPE_\w+|default)\s*:)+)(.*?)break;",
                             body, re.S):
        labels = re.findall(r"LLAMA_VOCAB_PRE_TYPE_(\w+)", group.group(1))
        if "default" in group.group(1):
            labels.append("DEFAULT")
        statements = group.group(2)
        m = re.search(r"regex_exprs\s*=\s*\{(.*?)\};", statements, re.S)
        patterns = []
        for element in split_top_level_commas(m.group(1)):
            parts = STRING_LITERAL.findall(element)
            if parts:
                patterns.append("".join(unescape_cpp(p) for p in parts))
        raw = re.search(r"byte_encode\s*=\s*false", statements) is not None
        for label in labels:
            types[label] = {"patterns": patterns, "raw_utf8": raw}
    return types


def parse_names(source):
    """{name: {"type": PRE_TYPE, flags...}} from the tokenizer.ggml.pre mapping in load()."""
    start = source.index('} else if (tokenizer_pre == "default") {')
    end = source.index("unknown pre-tokenizer type", start)
    body = strip_comments(source[start:end])
    names = {}
    for block in re.split(r"\}\s*else if\s*\(", body):
        block_names = re.findall(r'tokenizer_pre\s*==\s*"([^"]+)"', block)
        pre_type = re.findall(r"pre_type\s*=\s*LLAMA_VOCAB_PRE_TYPE_(\w+)", block)
        if not block_names or not pre_type:
            continue
        flags = dict(re.findall(r"\b(ignore_merges|add_bos|escape_whitespaces|add_sep)\s*=\s*"
                                r"(true|false)\s*;", block))
        for name in block_names:
            names[name] = {
                "type": pre_type[0],
                "ignore_merges": flags.get("ignore_merges") == "true",
                "add_bos": flags.get("add_bos") == "true",
                "escape_whitespaces": flags.get("escape_whitespaces") == "true",
                "add_sep": flags.get("add_sep") == "true",
            }
    return names


def as_llama_cpp_runs_it(pattern):
    r"""The expression llama.cpp effectively matches for `pattern`.

    Besides the hand-written splitters (CUSTOM), two things differ from Python's reading:
    - an expression with \p{...} is matched by std::regex on a "collapsed" text, one byte per
      code point standing for its category, and \p{Lu}, \p{Ll}, \p{Lt}, \p{Lm} and \p{Lo} all
      collapse to the one letter class: for llama.cpp they are all \p{L};
    - std::regex's \d is ASCII only.
    """
    if pattern in CUSTOM:
        return CUSTOM[pattern]
    pattern = re.sub(r"\\p\{L[ultmo]\}", r"\\p{L}", pattern)
    return pattern.replace("\\d", "[0-9]")


def split(text, patterns):
    """llama.cpp's unicode_regex_split (before byte encoding): piece lengths in code points."""
    pieces = [text]
    for pattern in patterns:
        compiled = regex.compile(as_llama_cpp_runs_it(pattern))
        out = []
        for piece in pieces:
            last = 0
            for m in compiled.finditer(piece):
                if m.start() > last:
                    out.append(piece[last:m.start()])
                if m.end() > m.start():
                    out.append(piece[m.start():m.end()])
                last = m.end()
            if last < len(piece):
                out.append(piece[last:])
        pieces = out
    assert "".join(pieces) == text
    return pieces


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1], encoding="utf-8") as f:
        source = f.read()
    types = parse_pre_types(source)
    names = parse_names(source)
    for name, info in names.items():
        if info["type"] not in types:
            sys.exit(f"{name}: pre type {info['type']} has no regex list")

    with open(VOCAB_INP, encoding="utf-8") as f:
        inp = f.read()
    strings = inp.split("\n__ggml_vocab_test__\n")[:-1] + EXTRA_STRINGS

    result = {
        "source": "llama-cpp-python 0.3.36, vendor/llama.cpp/src/llama-vocab.cpp",
        "note": "splits are byte lengths of the UTF-8 pieces; generated by "
                "scripts/gen_pretokenizer_splits.py",
        "strings": strings,
        "types": {},
        "names": names,
    }
    for type_name, info in sorted(types.items()):
        splits = []
        for s in strings:
            splits.append([len(p.encode("utf-8")) for p in split(s, info["patterns"])])
        result["types"][type_name] = {"raw_utf8": info["raw_utf8"], "patterns": info["patterns"],
                                      "splits": splits}
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"{OUT}: {len(names)} names, {len(types)} pre types, {len(strings)} strings")


if __name__ == "__main__":
    main()
