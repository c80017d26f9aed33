#include "coordinator/sse_text_event.h"

#include <utility>

#include "coordinator/openai_response.h"

namespace tpserve {

namespace {

// Appends `text` escaped as a JSON string's inside. Plain ASCII is escaped here; text with any
// other byte goes through nlohmann, whose handling of invalid UTF-8 (replaced) the rest of the
// reply follows.
void AppendEscaped(absl::string_view text, std::string* out) {
  const size_t start = out->size();
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x80) {
      out->resize(start);
      const std::string quoted = Dump(nlohmann::json(std::string(text)));
      out->append(quoted, 1, quoted.size() - 2);
      return;
    }
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (byte < 0x20) {
          static constexpr char kHex[] = "0123456789abcdef";
          out->append("\\u00");
          out->push_back(kHex[byte >> 4]);
          out->push_back(kHex[byte & 0xf]);
        } else {
          out->push_back(c);
        }
    }
  }
}

}  // namespace

std::optional<SseTextEvent> SseTextEvent::From(const nlohmann::json& document) {
  const std::string whole = SseEvent(document);
  const std::string marker = JsonString(kMarker);
  const size_t at = whole.find(marker);
  if (at == std::string::npos || whole.find(marker, at + 1) != std::string::npos) {
    return std::nullopt;
  }
  return SseTextEvent(whole.substr(0, at + 1), whole.substr(at + marker.size() - 1));
}

std::string SseTextEvent::Render(absl::string_view text) const {
  std::string event;
  event.reserve(before_.size() + text.size() + after_.size() + 8);
  event.append(before_);
  AppendEscaped(text, &event);
  event.append(after_);
  return event;
}

std::string JsonString(absl::string_view text) {
  std::string quoted = "\"";
  AppendEscaped(text, &quoted);
  quoted.push_back('"');
  return quoted;
}

}  // namespace tpserve
