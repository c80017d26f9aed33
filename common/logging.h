// One line per event on stderr: "2026-11-30T03:48:39.123Z I component] message".
// Thread-safe: each line is written with a single fwrite.
#pragma once

#include <string_view>

#include "absl/strings/str_format.h"

namespace tpserve {

enum class LogLevel { kInfo, kWarning, kError };

void LogLine(LogLevel level, std::string_view component, std::string_view message);

template <typename... Args>
void LogInfo(std::string_view component, const absl::FormatSpec<Args...>& format,
             const Args&... args) {
  LogLine(LogLevel::kInfo, component, absl::StrFormat(format, args...));
}

template <typename... Args>
void LogWarning(std::string_view component, const absl::FormatSpec<Args...>& format,
                const Args&... args) {
  LogLine(LogLevel::kWarning, component, absl::StrFormat(format, args...));
}

template <typename... Args>
void LogError(std::string_view component, const absl::FormatSpec<Args...>& format,
              const Args&... args) {
  LogLine(LogLevel::kError, component, absl::StrFormat(format, args...));
}

}  // namespace tpserve
