#include "tokenizer/pretokenizer_kinds.h"

#include <array>

namespace kestrel::tokenizer {

namespace {

// The expressions are llama.cpp's (the split patterns of the models' tokenizer.json, with
// case-insensitive contractions spelled out as [sS] etc., since PCRE's Unicode case folding would
// also fold characters such as U+017F, long s, onto 's'), written the way llama.cpp actually
// matches them where that differs from reading them literally:
//  - llama.cpp matches an expression that uses \p{...} on a "collapsed" text in which every code
//    point is one byte standing for its category, and \p{Lu}, \p{Ll}, \p{Lt}, \p{Lm} and \p{Lo}
//    all collapse to the letter class, so where llama.cpp writes them this table writes \p{L};
//  - its std::regex \d is ASCII only, written here as [0-9];
//  - three expressions are stand-ins for hand-written splitters in llama.cpp's unicode.cpp (Kimi K2,
//    AFMoE's digit groups, reused by Tiny Aya); this table writes what that code does.
// scripts/gen_pretokenizer_splits.py derives the same from llama.cpp's source independently, and
// tests/unit/pretokenizer_table_test.cpp checks every name against it.

using Names = std::string_view;
using Pattern = std::string_view;

#define KESTREL_CONTRACTIONS R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))"

// GPT-2's expression (without tokenizer.json's final \s+: an unmatched space is a word anyway).
constexpr Pattern kGpt2Words =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";

// Llama 3: letters with one leading non-letter, digits in threes, punctuation with its newlines.
constexpr Pattern kLlama3Words = KESTREL_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen2: Llama 3 with digits one at a time.
constexpr Pattern kQwen2Words = KESTREL_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// GPT-4o (o200k): a word is an optional non-letter, then upper-case letters followed by lower-case
// ones or the reverse, then a contraction. llama.cpp's form of "\p{Lu}...\p{Ll}": a letter that is
// not a-z / not A-Z (so non-ASCII letters count as both cases).
#define KESTREL_O200K_WORDS(L)                                                             \
  R"([^\r\n\p{L}\p{N}]?((?=[)" L R"(])([^a-z]))*((?=[)" L R"(])([^A-Z]))+)" KESTREL_CONTRACTIONS \
  R"(?|[^\r\n\p{L}\p{N}]?((?=[)" L R"(])([^a-z]))+((?=[)" L R"(])([^A-Z]))*)" KESTREL_CONTRACTIONS \
  R"(?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"

// DeepSeek V3 / Hunyuan: digits in threes, CJK and kana runs, then words.
constexpr Pattern kCjkKanaRuns = R"([一-龥぀-ゟ゠-ヿ]+)";
constexpr Pattern kDeepseek3Words =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+)"
    R"(| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Poro, Bloom, GPT-3 Finnish, Viking: a word is anything up to a space or punctuation mark.
constexpr Pattern kPoroWords = R"( ?[^(\s|.,!?…。，、।۔،)]+)";

constexpr Pattern kNewlineRuns = R"([^\n]+|[\n]+)";

// AFMoE's digit splitter (also Tiny Aya's): a run of digits in groups of three counted from its
// end, the first group taking the remainder.
constexpr Pattern kDigitsInThreesFromEnd = R"(\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N})))";

// llama.cpp's Han test (unicode_cpt_is_han): the CJK ideograph blocks, not the Han script.
#define KESTREL_HAN                                                                      \
  R"([\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2EBEF})" \
  R"(\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}])"

constexpr Pattern kDefault[] = {
    R"([\p{P}\$\+<=>\^~\|]+)",
    kGpt2Words,
    R"(\p{N}+)",
    R"([0-9][0-9][0-9])",
};
constexpr Pattern kGpt2[] = {kGpt2Words};
constexpr Pattern kLlama3[] = {kLlama3Words};
constexpr Pattern kQwen2[] = {kQwen2Words};
constexpr Pattern kQwen35[] = {
    KESTREL_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
// Llama 3 with tokenizer.json's cascade of whitespace lengths.
constexpr Pattern kJais2[] = {
    KESTREL_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+)"
    R"(|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S))"
    R"(|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})",
};
constexpr Pattern kMinicpm5[] = {
    R"(\p{N}{1,3})",
    KESTREL_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
constexpr Pattern kDeepseekLlm[] = {
    R"([\r\n])",
    // Letters of the Latin, Greek, Cyrillic, Armenian, Georgian, Cherokee, ... blocks, written as
    // code points because several of them have canonical equivalents an editor may substitute.
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
    R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A})"
    R"(\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})"
    R"(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF})"
    R"(\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})"
    R"(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-)"
    R"(\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC})"
    R"(\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC})"
    R"(\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128})"
    R"(\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E})"
    R"(\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3})"
    R"(\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E})"
    R"(\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A})"
    R"(\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-)"
    R"(\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)",
    R"(\s?[!-/:-~！-／：-～‘-‟　-。]+)",
    R"(\s+$)",
    R"([一-龥ࠀ-一가-퟿]+)",
    R"(\p{N}+)",
};
constexpr Pattern kDeepseekCoder[] = {
    R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", R"([一-龥ࠀ-一가-퟿]+)", R"(\p{N})",
};
constexpr Pattern kDeepseek3[] = {R"(\p{N}{1,3})", kCjkKanaRuns, kDeepseek3Words};
constexpr Pattern kSpark25[] = {
    R"(\p{N}{1,3})",
    kCjkKanaRuns,
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+)"
    R"(| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+)",
    R"(\p{N})",
};
// llama.cpp writes [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+ here (see the top).
constexpr Pattern kYoutu[] = {
    R"([가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+)",
    R"([^\r\n\p{L}\p{N}]?[\p{L}\p{M}]*[\p{L}\p{M}]+)" KESTREL_CONTRACTIONS
    R"(?|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+[\p{L}\p{M}]*)" KESTREL_CONTRACTIONS
    R"(?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
constexpr Pattern kFalcon[] = {
    R"([\p{P}\$\+<=>\^~\|`]+)",
    kGpt2Words,
    R"([0-9][0-9][0-9])",
};
// StarCoder, Refact, Command-R, SmolLM, ...: GPT-2 with every digit its own word.
constexpr Pattern kStarcoder[] = {R"(\p{N})", kGpt2Words};
constexpr Pattern kPoro[] = {kPoroWords};
constexpr Pattern kViking[] = {kPoroWords, R"(\p{N})"};
constexpr Pattern kTekken[] = {
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+)"
    R"(|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*)"
    R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
constexpr Pattern kChameleon[] = {
    R"(<sentinel:[0-9]+>)",                    // sentinel tokens
    R"((IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z)",  // image tokens
    R"(([\t\n]|    |  ))",
    R"(\p{N})",
    R"([\p{P}!-/:-@\[-`{-~])",
    kGpt2Words,
};
constexpr Pattern kGpt4o[] = {KESTREL_O200K_WORDS(R"(\p{L})")};
// GPT-4o's with combining marks counted as letters.
constexpr Pattern kGraniteEmbedMulti[] = {KESTREL_O200K_WORDS(R"(\p{L}\p{M})")};
// llama.cpp writes \d{1,3}(?=(?:\d{3})*\b) and \p{Lu}... here (see the top).
constexpr Pattern kTinyAya[] = {
    kDigitsInThreesFromEnd,
    R"([^\r\n\p{L}\p{N}]?[\p{L}\p{M}]*[\p{L}\p{M}]+)" KESTREL_CONTRACTIONS
    R"(?|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+[\p{L}\p{M}]*)" KESTREL_CONTRACTIONS
    R"(?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
// llama.cpp's Kimi K2 splitter: Han runs, then words of non-Han letters (any case; no \p{M}) with
// a contraction, then Llama 3's digits, punctuation and whitespace.
constexpr Pattern kKimiK2[] = {
    KESTREL_HAN R"(+|[^\r\n\p{L}\p{N}]?(?:(?!)" KESTREL_HAN R"()\p{L})+)"
    R"((?:'[sStTmMdD]|'[rR][eE]|'[vV][eE]|'[lL][lL])?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
// Digit runs, then a split before every group of three digits that ends the run (an empty match
// splits too). llama.cpp writes \d; its \d is ASCII.
constexpr Pattern kSuperbpe[] = {R"(\p{N}+)", R"((?=([0-9]{3})+(?![0-9])))"};
// tokenizer.json's possessive quantifiers made greedy, as llama.cpp does.
constexpr Pattern kBailingmoe[] = {
    R"('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)",
};
constexpr Pattern kSeedCoder[] = {
    KESTREL_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
// Qwen2 without the contractions (Turkish suffixes after an apostrophe stay with their word).
constexpr Pattern kUfakzeka[] = {
    R"([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
constexpr Pattern kAfmoe[] = {
    kDigitsInThreesFromEnd,
    R"([一-鿿㐀-䶿豈-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-힯ᄀ-ᇿ]+)",
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+)"
    R"(| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
constexpr Pattern kLaguna[] = {kNewlineRuns, kQwen2Words};
constexpr Pattern kExaoneMoe[] = {
    KESTREL_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?)"
    R"(|\s*[\r\n]|\s+(?!\S)|\s+)",
};
// Gemma 4 / Sarvam: BPE over the whole line (spaces already U+2581); only newlines split.
constexpr Pattern kNewlines[] = {kNewlineRuns};

#undef KESTREL_CONTRACTIONS
#undef KESTREL_O200K_WORDS
#undef KESTREL_HAN

constexpr Names kDefaultNames[] = {"default"};
constexpr Names kGpt2Names[] = {
    "gpt-2",      "phi-2", "jina-es",      "jina-de",     "gigachat",   "jina-v2-es", "jina-v2-de",
    "a.x-4.0",    "mellum", "modern-bert", "jina-v1-en",  "jina-v2-code", "roberta-bpe", "exaone4",
    "mpt",        "olmo",  "jais",         "trillion",    "granite-docling",
};
constexpr Names kLlama3Names[] = {"llama3", "llama-v3",  "llama-bpe", "falcon3",     "falcon-h1",
                                  "pixtral", "midm-2.0", "lfm2",      "jina-v5-nano"};
constexpr Names kLlama3RegexNames[] = {"dbrx", "smaug-bpe", "chatglm-bpe"};
constexpr Names kGlm4Names[] = {"glm4", "glm5"};
constexpr Names kJais2Names[] = {"jais-2"};
constexpr Names kMinicpm5Names[] = {"minicpm5"};
constexpr Names kDeepseekLlmNames[] = {"deepseek-llm"};
constexpr Names kDeepseekCoderNames[] = {"deepseek-coder"};
constexpr Names kDeepseek3Names[] = {"deepseek-v3", "hunyuan-dense", "hy_v4", "joyai-llm"};
constexpr Names kSpark25Names[] = {"spark2_5"};
constexpr Names kYoutuNames[] = {"youtu"};
constexpr Names kFalconNames[] = {"falcon"};
constexpr Names kStarcoderNames[] = {"starcoder", "refact",     "command-r", "smollm",
                                     "codeshell", "exaone",     "minerva-7b", "mellum2"};
constexpr Names kQwen2Names[] = {"qwen2",     "deepseek-r1-qwen", "kormo",   "f2llmv2",   "megrez",
                                 "stablelm2", "hunyuan",          "solar-open", "grok-2"};
constexpr Names kQwen35Names[] = {"qwen35"};
constexpr Names kPoroNames[] = {"poro-chat", "bloom", "gpt3-finnish"};
constexpr Names kVikingNames[] = {"viking"};
constexpr Names kTekkenNames[] = {"tekken"};
constexpr Names kChameleonNames[] = {"chameleon"};
constexpr Names kGpt4oNames[] = {"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"};
constexpr Names kGraniteEmbedMultiNames[] = {"granite-embed-multi-97m"};
constexpr Names kTinyAyaNames[] = {"tiny_aya", "cohere2moe"};
constexpr Names kKimiK2Names[] = {"kimi-k2"};
constexpr Names kSuperbpeNames[] = {"superbpe"};
constexpr Names kBailingmoeNames[] = {"bailingmoe", "bailingmoe2", "llada-moe"};
constexpr Names kSeedCoderNames[] = {"seed-coder"};
constexpr Names kUfakzekaNames[] = {"ufakzeka"};
constexpr Names kAfmoeNames[] = {"afmoe"};
constexpr Names kLagunaNames[] = {"laguna"};
constexpr Names kExaoneMoeNames[] = {"exaone-moe"};
constexpr Names kGemma4Names[] = {"gemma4", "granite-embed-multi-311m"};
constexpr Names kSarvamNames[] = {"sarvam-moe"};

constexpr PreTokenizerKind kKinds[] = {
    {.names = kDefaultNames, .patterns = kDefault},
    {.names = kGpt2Names, .patterns = kGpt2},
    {.names = kLlama3Names, .patterns = kLlama3, .ignore_merges = true, .add_bos = true},
    {.names = kLlama3RegexNames, .patterns = kLlama3},
    {.names = kGlm4Names, .patterns = kLlama3, .ignore_merges = true},
    {.names = kJais2Names, .patterns = kJais2},
    {.names = kMinicpm5Names, .patterns = kMinicpm5, .ignore_merges = true},
    {.names = kDeepseekLlmNames, .patterns = kDeepseekLlm},
    {.names = kDeepseekCoderNames, .patterns = kDeepseekCoder},
    {.names = kDeepseek3Names, .patterns = kDeepseek3},
    {.names = kSpark25Names, .patterns = kSpark25},
    {.names = kYoutuNames, .patterns = kYoutu, .ignore_merges = true},
    {.names = kFalconNames, .patterns = kFalcon},
    {.names = kStarcoderNames, .patterns = kStarcoder},
    {.names = kQwen2Names, .patterns = kQwen2},
    {.names = kQwen35Names, .patterns = kQwen35},
    {.names = kPoroNames, .patterns = kPoro},
    {.names = kVikingNames, .patterns = kViking},
    {.names = kTekkenNames, .patterns = kTekken, .ignore_merges = true, .add_bos = true},
    {.names = kChameleonNames, .patterns = kChameleon, .add_bos = true},
    {.names = kGpt4oNames, .patterns = kGpt4o},
    {.names = kGraniteEmbedMultiNames, .patterns = kGraniteEmbedMulti, .ignore_merges = true},
    {.names = kTinyAyaNames, .patterns = kTinyAya},
    {.names = kKimiK2Names, .patterns = kKimiK2},
    {.names = kSuperbpeNames, .patterns = kSuperbpe},
    {.names = kBailingmoeNames, .patterns = kBailingmoe},
    {.names = kSeedCoderNames, .patterns = kSeedCoder},
    {.names = kUfakzekaNames, .patterns = kUfakzeka},
    {.names = kAfmoeNames, .patterns = kAfmoe},
    {.names = kLagunaNames, .patterns = kLaguna},
    {.names = kExaoneMoeNames, .patterns = kExaoneMoe},
    {.names = kGemma4Names,
     .patterns = kNewlines,
     .force_bos = true,
     .raw_utf8 = true,
     .newline_runs_as_tokens = true},
    {.names = kSarvamNames, .patterns = kNewlines, .raw_utf8 = true},
};

}  // namespace

const PreTokenizerKind* find_pre_tokenizer_kind(std::string_view name) {
  if (name.empty()) name = "default";
  for (const PreTokenizerKind& kind : kKinds) {
    for (const std::string_view candidate : kind.names) {
      if (candidate == name) return &kind;
    }
  }
  return nullptr;
}

std::string pre_tokenizer_names() {
  std::string list;
  for (const PreTokenizerKind& kind : kKinds) {
    for (const std::string_view name : kind.names) {
      if (!list.empty()) list += ", ";
      list += name;
    }
  }
  return list;
}

}  // namespace kestrel::tokenizer
