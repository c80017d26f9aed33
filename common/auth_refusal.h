// One refused credential (an API key, the admin key, the cluster token): logged as one line with
// the surface, what was called and the peer, never the secret offered, and counted by the
// process's counter when it has one (the coordinator's tpserve:auth_failures_total; workers,
// which have no /metrics, only log).
#pragma once

#include <functional>
#include <string_view>

namespace tpserve {

// Surfaces, the label values of the counter.
inline constexpr char kSurfaceHttp[] = "http";            // HTTP /v1/*: API key
inline constexpr char kSurfaceInference[] = "inference";  // gRPC InferenceService: API key
inline constexpr char kSurfaceAdmin[] = "admin";          // gRPC AdminService: admin key
inline constexpr char kSurfaceCluster[] = "cluster";      // ClusterService, WorkerService: token

// Installs the counter (before any server starts; it must outlive them).
void SetAuthRefusalCounter(std::function<void(const char* surface)> counter);

// `what`: the method or request line; `peer`: the caller's address; `why`: "no key", "a wrong
// token", ... (never the key).
void RecordAuthRefusal(const char* surface, std::string_view what, std::string_view peer,
                       std::string_view why);

}  // namespace tpserve
