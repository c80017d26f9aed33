// JSON string escapes shared by the writers that must match a reference byte for byte
// (nlohmann's dump for API replies, Python's json.dumps for chat templates' tojson): both write
// the two-character escapes, and \u with four lowercase hex digits for other characters.
#pragma once

#include <cstdint>
#include <string>

namespace tpserve {

// The two-character escape of `c` ("\\n" for a newline, "\\\"" for a quote), or nullptr.
const char* ShortJsonEscape(char32_t c);

// Appends "\u" and `unit` (a UTF-16 code unit) as four lowercase hex digits.
void AppendJsonUnicodeEscape(uint32_t unit, std::string* out);

}  // namespace tpserve
