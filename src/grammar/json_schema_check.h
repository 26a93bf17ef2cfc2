// What of JSON Schema structured output enforces, checked before compiling: every keyword of the
// schema must be one the grammar engine enforces (or a pure annotation such as "description"), and
// every "format" one it knows. Anything else would be silently ignored by the generated grammar,
// so a request using it is refused with the keyword and where it sits.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace kestrel::grammar {

// "" if the schema uses only enforced keywords; otherwise why not, e.g.
// "keyword 'uniqueItems' at /properties/tags is not supported".
std::string unsupported_schema_feature(const nlohmann::json& schema);

}  // namespace kestrel::grammar
