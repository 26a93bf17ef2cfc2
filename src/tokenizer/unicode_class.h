// Per-code-point Unicode facts the WordPiece normaliser needs, from ICU (libicu): general category
// groups, White_Space, simple lowercase and the canonical decomposition. They follow llama.cpp's
// tables (scripts/gen-unicode-data.py in its source), which are built from UnicodeData.txt the
// same way: a category group per code point, unassigned code points (Cn) in no group.
#pragma once

#include <cstdint>

namespace kestrel::tokenizer {

struct CodepointClass {
  bool whitespace = false;   // llama.cpp's White_Space list: U+0009-000D, U+0020, U+0085, U+00A0, ...
  bool control = false;      // \p{C} except unassigned: Cc, Cf, Co, Cs
  bool mark = false;         // \p{M}: Mn, Mc, Me (accents once decomposed)
  bool punctuation = false;  // \p{P}
  bool symbol = false;       // \p{S}
};

CodepointClass classify_codepoint(uint32_t cpt);

// UnicodeData's simple lowercase mapping (cpt itself when there is none).
uint32_t simple_lowercase(uint32_t cpt);

// The first code point of cpt's full canonical decomposition (NFD), cpt when it has none: what
// llama.cpp's unicode_cpts_normalize_nfd maps each code point to ("é" -> "e"; the accent it
// drops is a mark that the normaliser would strip anyway).
uint32_t nfd_first(uint32_t cpt);

}  // namespace kestrel::tokenizer
