#include "coordinator/response_store.h"

#include <utility>

namespace tpserve {

void ResponseStore::Put(const std::string& id, StoredResponse stored) {
  const int64_t bytes = static_cast<int64_t>(stored.messages.dump().size() +
                                             stored.response.dump().size() + id.size());
  if (bytes > max_bytes_ || max_entries_ <= 0) return;  // never kept: a later lookup is a 404
  absl::MutexLock lock(&mutex_);
  if (auto it = entries_.find(id); it != entries_.end()) Erase(it);
  lru_.push_front(id);
  entries_[id] = Entry{std::move(stored), bytes, lru_.begin()};
  bytes_ += bytes;
  Evict();
}

std::optional<StoredResponse> ResponseStore::Get(const std::string& id) {
  absl::MutexLock lock(&mutex_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.stored;
}

bool ResponseStore::Delete(const std::string& id) {
  absl::MutexLock lock(&mutex_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  Erase(it);
  return true;
}

void ResponseStore::Erase(absl::flat_hash_map<std::string, Entry>::iterator it) {
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

void ResponseStore::Evict() {
  while (!lru_.empty() &&
         (static_cast<int64_t>(entries_.size()) > max_entries_ || bytes_ > max_bytes_)) {
    Erase(entries_.find(lru_.back()));
  }
}

}  // namespace tpserve
