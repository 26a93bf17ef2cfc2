// Builds the syntax tree from tokens, following jinja2's grammar and operator precedence.
#pragma once

#include <string_view>

#include "chat/ast.h"

namespace kestrel::chat {

// Parses a whole template. Throws ChatTemplateError (syntax) with the position of the offending
// token.
Body parse_template(std::string_view source);

}  // namespace kestrel::chat
