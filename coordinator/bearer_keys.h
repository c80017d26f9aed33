// Keys a caller must present as `Authorization: Bearer <key>` (HTTP) or gRPC metadata
// `authorization`: the public API's keys (`--api-key`, `--api-key-file`, TPSERVE_API_KEY) on
// HTTP /v1/* and InferenceService but Health, and the admin keys (`--admin-key-file`,
// TPSERVE_ADMIN_KEY) on AdminService's operations. No key configured: open.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/auth_refusal.h"
#include "grpcpp/grpcpp.h"

namespace tpserve {

inline constexpr char kApiKeyEnv[] = "TPSERVE_API_KEY";
inline constexpr char kAdminKeyEnv[] = "TPSERVE_ADMIN_KEY";

class BearerKeys {
 public:
  // `keys` from flags, plus one key per non-empty line of `file` (if given) and of the
  // environment variable `env`. An unreadable or keyless file is an error naming the file only.
  static absl::StatusOr<BearerKeys> Load(const std::vector<std::string>& keys,
                                         const std::string& file, const char* env);

  bool empty() const { return keys_.empty(); }

  // Whether `authorization` (an HTTP header or gRPC metadata value) is "Bearer <a key>"; true for
  // anything when no key is configured. Compares against every key in constant time per key.
  // A caller that refuses on false records it (RecordAuthRefusal).
  bool Accepts(const std::string& authorization) const;

  // The same for a gRPC call's metadata: OK, or UNAUTHENTICATED naming `method`, recorded under
  // `surface` (kSurfaceInference, kSurfaceAdmin) with the peer, never the key.
  grpc::Status Check(const grpc::ServerContextBase& context, const char* method,
                     const char* surface) const;

 private:
  std::vector<std::string> keys_;
};

}  // namespace tpserve
