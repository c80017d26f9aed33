// The Responses API's stored responses (store: true, OpenAI's default): what a later request's
// previous_response_id continues, and what GET /v1/responses/{id} returns. In memory, bounded in
// count and bytes; the least recently used go first, and a server restart forgets them all (an
// unknown id is a 404 naming the field). Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

namespace tpserve {

struct StoredResponse {
  // The conversation up to and including this response's output, as chat messages.
  nlohmann::ordered_json messages;
  nlohmann::ordered_json response;  // the response object as it was returned
};

class ResponseStore {
 public:
  ResponseStore(int64_t max_entries, int64_t max_bytes)
      : max_entries_(max_entries), max_bytes_(max_bytes) {}

  void Put(const std::string& id, StoredResponse stored);
  std::optional<StoredResponse> Get(const std::string& id);
  bool Delete(const std::string& id);

 private:
  struct Entry {
    StoredResponse stored;
    int64_t bytes = 0;
    std::list<std::string>::iterator lru;
  };
  void Evict() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void Erase(absl::flat_hash_map<std::string, Entry>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const int64_t max_entries_;
  const int64_t max_bytes_;
  absl::Mutex mutex_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mutex_);
  std::list<std::string> lru_ ABSL_GUARDED_BY(mutex_);  // most recently used first
  int64_t bytes_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace tpserve
