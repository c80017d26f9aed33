// The public API's keys (`--api-key`, `--api-key-file`, TPSERVE_API_KEY): what a client must
// send as `Authorization: Bearer <key>` on HTTP /v1/* and as gRPC metadata `authorization` on
// InferenceService (Health excepted). No key configured: the client APIs are open.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tpserve {

inline constexpr char kApiKeyEnv[] = "TPSERVE_API_KEY";

class ApiKeys {
 public:
  // `keys` from flags, plus one key per non-empty line of `file` (if given) and of the
  // environment variable. An unreadable or keyless file is an error naming the file only.
  static absl::StatusOr<ApiKeys> Load(const std::vector<std::string>& keys,
                                      const std::string& file);

  bool empty() const { return keys_.empty(); }

  // Whether `authorization` (an HTTP header or gRPC metadata value) is "Bearer <a key>"; true for
  // anything when no key is configured. Compares against every key in constant time per key.
  bool Accepts(const std::string& authorization) const;

 private:
  std::vector<std::string> keys_;
};

}  // namespace tpserve
