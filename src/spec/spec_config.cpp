#include "spec/spec_config.h"

#include "core/error.h"

namespace kestrel {

const char* spec_method_name(SpecMethod method) {
  switch (method) {
    case SpecMethod::None: return "none";
    case SpecMethod::Ngram: return "ngram";
    case SpecMethod::DraftModel: return "draft";
  }
  return "?";
}

SpecMethod parse_spec_method(const std::string& name) {
  if (name == "none" || name == "off") return SpecMethod::None;
  if (name == "ngram") return SpecMethod::Ngram;
  if (name == "draft") return SpecMethod::DraftModel;
  fail("unknown speculative decoding method '{}' (expected ngram, draft or none)", name);
}

}  // namespace kestrel
