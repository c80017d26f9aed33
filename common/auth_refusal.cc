#include "common/auth_refusal.h"

#include <utility>

#include "common/logging.h"

namespace tpserve {
namespace {

// Written once at start-up, before any thread that refuses exists.
std::function<void(const char*)>& Counter() {
  static auto* counter = new std::function<void(const char*)>();
  return *counter;
}

}  // namespace

void SetAuthRefusalCounter(std::function<void(const char* surface)> counter) {
  Counter() = std::move(counter);
}

void RecordAuthRefusal(const char* surface, std::string_view what, std::string_view peer,
                       std::string_view why) {
  LogWarning("auth", "refused %s %s from %s: %s", surface, what, peer, why);
  if (Counter()) Counter()(surface);
}

}  // namespace tpserve
