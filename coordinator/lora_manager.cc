#include "coordinator/lora_manager.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/engine.h"
#include "coordinator/worker_pool.h"

namespace tpserve {
namespace {

constexpr char kLog[] = "lora";

}  // namespace

LoraManager::LoraManager(std::string served_name, std::vector<LoraModule> initial,
                         int32_t max_loras)
    : served_name_(std::move(served_name)), max_loras_(max_loras) {
  for (LoraModule& module : initial) {
    next_generation_ = std::max(next_generation_, module.generation);
    entries_.push_back({std::move(module), State::kServing});
  }
}

void LoraManager::SetEngine(Engine* engine, WorkerPool* pool) {
  absl::MutexLock lock(&mutex_);
  for (const Entry& e : entries_) engine->adapters().Open(e.module.slot, e.module.generation);
  pool_ = pool;
  engine_ = engine;
}

std::vector<LoraModule> LoraManager::Serving() const {
  absl::MutexLock lock(&mutex_);
  std::vector<LoraModule> out;
  for (const Entry& e : entries_) {
    if (e.state == State::kServing) out.push_back(e.module);
  }
  return out;
}

std::vector<LoraModule> LoraManager::OnWorkers() const {
  absl::MutexLock lock(&mutex_);
  std::vector<LoraModule> out;
  for (const Entry& e : entries_) {
    if (e.state != State::kLoading) out.push_back(e.module);
  }
  return out;
}

LoraManager::Entry* LoraManager::Find(const std::string& name) {
  for (Entry& e : entries_) {
    if (e.module.name == name) return &e;
  }
  return nullptr;
}

void LoraManager::Erase(const std::string& name) {
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                [&](const Entry& e) { return e.module.name == name; }),
                 entries_.end());
}

absl::StatusOr<LoraModule> LoraManager::Load(const std::string& name, const std::string& path,
                                             absl::Duration timeout) {
  absl::MutexLock change(&change_mutex_);
  Engine* engine = engine_.load();
  WorkerPool* pool = pool_.load();
  if (engine == nullptr) return absl::UnavailableError("the cluster is starting");
  if (name.empty() || path.empty()) {
    return absl::InvalidArgumentError("an adapter needs a name and a path");
  }
  LoraModule module{name, path, 0, 0};
  {
    absl::MutexLock lock(&mutex_);
    if (name == served_name_ || Find(name) != nullptr) {
      return absl::AlreadyExistsError(absl::StrCat("the name ", name, " is taken"));
    }
    for (int32_t slot = 1; slot <= max_loras_ && module.slot == 0; ++slot) {
      const bool taken = std::any_of(entries_.begin(), entries_.end(),
                                     [slot](const Entry& e) { return e.module.slot == slot; });
      if (!taken) module.slot = slot;
    }
    if (module.slot == 0) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "every one of the ", max_loras_, " adapter slots is taken (--max-loras); unload one"));
    }
    module.generation = ++next_generation_;
    entries_.push_back({module, State::kLoading});
  }
  const absl::Status loaded = pool->LoadAdapter(module.slot, path, timeout);
  absl::MutexLock lock(&mutex_);
  if (!loaded.ok()) {
    Erase(name);
    // Ranks that loaded it keep a slot no request can use until it is taken again.
    return loaded;
  }
  engine->adapters().Open(module.slot, module.generation);
  Find(name)->state = State::kServing;
  LogInfo(kLog, "loaded LoRA adapter %s from %s into slot %d", name, path, module.slot);
  return module;
}

absl::Status LoraManager::Unload(const std::string& name, absl::Duration drain,
                                 absl::Duration timeout) {
  absl::MutexLock change(&change_mutex_);
  Engine* engine = engine_.load();
  WorkerPool* pool = pool_.load();
  if (engine == nullptr) return absl::UnavailableError("the cluster is starting");
  int32_t slot = 0;
  {
    absl::MutexLock lock(&mutex_);
    Entry* entry = Find(name);
    if (entry == nullptr) {
      return absl::NotFoundError(absl::StrCat("no LoRA adapter is named ", name));
    }
    entry->state = State::kUnloading;
    slot = entry->module.slot;
  }
  engine->adapters().Close(slot);
  const absl::Time deadline = absl::Now() + drain;
  while (engine->adapters().InUse(slot) > 0) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(engine->adapters().InUse(slot), " sequences still run with ", name,
                       "; it takes no new requests; unload it again to finish"));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  RETURN_IF_ERROR(pool->UnloadAdapter(slot, timeout));
  // Its cached prefixes are keyed by the slot, which a later adapter may take: they go now (no
  // sequence of it is left to hold them).
  if (absl::StatusOr<int32_t> flushed = engine->FlushPrefixCache(); !flushed.ok()) {
    return flushed.status();
  }
  absl::MutexLock lock(&mutex_);
  Erase(name);
  LogInfo(kLog, "unloaded LoRA adapter %s from slot %d", name, slot);
  return absl::OkStatus();
}

}  // namespace tpserve
