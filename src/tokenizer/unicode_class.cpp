#include "tokenizer/unicode_class.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "core/error.h"

namespace kestrel::tokenizer {

CodepointClass classify_codepoint(uint32_t cpt) {
  CodepointClass c;
  switch (cpt) {
    case 0x0020: case 0x0085: case 0x00A0: case 0x1680: case 0x2028: case 0x2029: case 0x202F:
    case 0x205F: case 0x3000:
      c.whitespace = true;
      break;
    default:
      c.whitespace = (cpt >= 0x0009 && cpt <= 0x000D) || (cpt >= 0x2000 && cpt <= 0x200A);
  }
  if (cpt > 0x10FFFF) return c;
  const uint32_t mask = U_GET_GC_MASK(UChar32(cpt));
  c.control = (mask & (U_GC_CC_MASK | U_GC_CF_MASK | U_GC_CO_MASK | U_GC_CS_MASK)) != 0;
  c.mark = (mask & U_GC_M_MASK) != 0;
  c.punctuation = (mask & U_GC_P_MASK) != 0;
  c.symbol = (mask & U_GC_S_MASK) != 0;
  return c;
}

uint32_t simple_lowercase(uint32_t cpt) {
  return cpt > 0x10FFFF ? cpt : uint32_t(u_tolower(UChar32(cpt)));
}

uint32_t nfd_first(uint32_t cpt) {
  if (cpt > 0x10FFFF) return cpt;
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(status);
  if (U_FAILURE(status)) fail("tokenizer: ICU's NFD data is unavailable ({})", u_errorName(status));
  icu::UnicodeString decomposition;
  if (!nfd->getDecomposition(UChar32(cpt), decomposition) || decomposition.isEmpty()) return cpt;
  return uint32_t(decomposition.char32At(0));
}

}  // namespace kestrel::tokenizer
