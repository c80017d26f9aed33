// Bounds on what one request may ask for, each checked before the part it bounds costs memory or
// time, and each refused with a 400 (INVALID_ARGUMENT) that names the field and the limit. The
// same flags on the coordinator and on the launcher that passes them on; the README lists them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "coordinator/openai_error.h"
#include "model/tokenizer.h"

namespace tpserve {

struct RequestLimits {
  int32_t max_n = 16;                    // samples of one request
  int32_t max_stop_strings = 16;         // `stop` strings
  int32_t max_stop_string_bytes = 4096;  // bytes of one stop string
  int32_t max_stop_token_ids = 1024;     // `stop_token_ids`
  int32_t max_tools = 128;               // `tools` (OpenAI's own limit)
  int32_t max_bad_words = 128;           // `bad_words`, each at most max_stop_string_bytes
  int32_t max_logit_bias = 300;          // `logit_bias` entries (at most the workers' 1024)
  int64_t max_constraint_bytes = 64
                                 << 10;   // a schema, regex, grammar, choice list or tools' schemas
  double grammar_compile_timeout_s = 10;  // seconds a constraint may take to compile
};

inline void AddRequestLimitFlags(CLI::App& app, RequestLimits* limits) {
  app.add_option("--max-n", limits->max_n, "most samples (n) one request may ask for")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--max-stop-strings", limits->max_stop_strings,
                 "most stop strings one request may send")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  app.add_option("--max-stop-string-bytes", limits->max_stop_string_bytes,
                 "longest stop string, in bytes (each is searched in every token's text)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-stop-token-ids", limits->max_stop_token_ids,
                 "most stop token ids one request may send")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--max-tools", limits->max_tools, "most tools one chat request may offer")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
  app.add_option("--max-logit-bias", limits->max_logit_bias,
                 "most logit_bias entries one request may send")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  app.add_option("--max-bad-words", limits->max_bad_words,
                 "most bad_words one request may send (each as long as a stop string at most)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
  app.add_option("--max-constraint-bytes", limits->max_constraint_bytes,
                 "longest JSON schema, regex, grammar or choice list (all choices, or all tools' "
                 "schemas, together), in bytes")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{16} << 20));
  app.add_option("--grammar-compile-timeout", limits->grammar_compile_timeout_s,
                 "seconds an output constraint may take to compile before the request gets 400")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 3600.0));
}

inline constexpr int32_t kMaxLogprobs = 20;  // alternatives per token

// The checks below are the one statement of each bound, for the HTTP parser (which names the
// field as its API spells it) and the engine (which checks what every front end submits).

// Samples per request, [1, limits.max_n]: INVALID_ARGUMENT naming n.
inline absl::Status CheckSampleCount(int64_t n, const RequestLimits& limits) {
  if (n >= 1 && n <= limits.max_n) return absl::OkStatus();
  return WithParam(absl::InvalidArgumentError(
                       absl::StrCat("n = ", n, " is outside [1, ", limits.max_n, "] (--max-n)")),
                   "n");
}

// Alternatives per token, [0, kMaxLogprobs]: INVALID_ARGUMENT naming `param`.
inline absl::Status CheckLogprobs(int64_t k, absl::string_view param) {
  if (k >= 0 && k <= kMaxLogprobs) return absl::OkStatus();
  return WithParam(absl::InvalidArgumentError(
                       absl::StrCat(param, " = ", k, " is outside [0, ", kMaxLogprobs, "]")),
                   param);
}

// `stop` against the limits, each string non-empty: INVALID_ARGUMENT naming stop or stop[i].
inline absl::Status CheckStopStrings(const std::vector<std::string>& stop,
                                     const RequestLimits& limits) {
  if (stop.size() > static_cast<size_t>(limits.max_stop_strings)) {
    return WithParam(absl::InvalidArgumentError(absl::StrCat(
                         "stop holds ", stop.size(), " strings; at most ", limits.max_stop_strings,
                         " are allowed (--max-stop-strings)")),
                     "stop");
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    const std::string param = absl::StrCat("stop[", i, "]");
    if (stop[i].empty()) {
      return WithParam(absl::InvalidArgumentError(param + " is empty"), param);
    }
    if (stop[i].size() > static_cast<size_t>(limits.max_stop_string_bytes)) {
      return WithParam(absl::InvalidArgumentError(absl::StrCat(
                           param, " is ", stop[i].size(), " bytes; at most ",
                           limits.max_stop_string_bytes, " are allowed (--max-stop-string-bytes)")),
                       param);
    }
  }
  return absl::OkStatus();
}

// The longest prompt text, in bytes, whose tokens could still fit `context_length`: no token
// spells more than the vocabulary's longest. A longer text is refused before it is tokenized.
inline int64_t MaxPromptBytes(int64_t context_length, const Tokenizer& tokenizer) {
  return context_length * std::max<int64_t>(tokenizer.max_token_bytes(), 1);
}

// Tokenizer::EncodePrompt of a text within MaxPromptBytes; INVALID_ARGUMENT, before any work,
// for a longer one.
inline absl::StatusOr<std::vector<int32_t>> EncodeBoundedPrompt(std::string_view text,
                                                                int64_t context_length,
                                                                const Tokenizer& tokenizer) {
  const int64_t limit = MaxPromptBytes(context_length, tokenizer);
  if (static_cast<int64_t>(text.size()) > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat("the prompt is ", text.size(), " bytes, more than the ", context_length,
                     " tokens of this model's context could hold (at most ", limit, " bytes)"));
  }
  return tokenizer.EncodePrompt(text);
}

}  // namespace tpserve
