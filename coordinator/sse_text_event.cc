#include "coordinator/sse_text_event.h"

#include <utility>

#include "common/json_escape.h"
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
    if (const char* escape = ShortJsonEscape(c); escape != nullptr) {
      out->append(escape);
    } else if (byte < 0x20) {
      AppendJsonUnicodeEscape(byte, out);
    } else {
      out->push_back(c);
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
