#include "coordinator/cluster_service.h"

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/cluster_token.h"
#include "common/logging.h"
#include "grpcpp/grpcpp.h"

namespace tpserve {
namespace {

constexpr char kLog[] = "cluster";
// How often waits look at cancellation of their call.
constexpr absl::Duration kPollInterval = absl::Milliseconds(100);

std::string Describe(const RegisteredWorker& w) {
  return absl::StrCat(w.address, " (host ", w.hostname, ", pid ", w.pid, ")");
}

}  // namespace

ClusterServiceImpl::LivenessProbe ClusterServiceImpl::StatusProbe(absl::Duration timeout) {
  return [timeout](const std::string& address) {
    auto stub = v1::WorkerService::NewStub(ClusterChannel(address));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    v1::WorkerStatusRequest request;
    v1::WorkerStatusResponse response;
    return stub->Status(&context, request, &response).ok();
  };
}

ClusterServiceImpl::ClusterServiceImpl(int world_size, LivenessProbe probe)
    : world_size_(world_size), probe_(std::move(probe)) {}

grpc::Status ClusterServiceImpl::Register(grpc::ServerContext* context,
                                          const v1::RegisterRequest* request,
                                          v1::RegisterResponse* response) {
  if (grpc::Status s = CheckClusterToken(*context, "ClusterService.Register"); !s.ok()) return s;
  const int rank = request->rank();
  if (rank < 0 || rank >= world_size_) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("rank ", rank, " is outside the world of ", world_size_,
                                     " ranks (valid ranks: 0..", world_size_ - 1, ")"));
  }
  if (request->address().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("rank ", rank, " registered without an address"));
  }
  RegisteredWorker worker{rank, request->address(), request->hostname(), request->pid()};

  std::optional<RegisteredWorker> previous;
  {
    absl::MutexLock lock(&mutex_);
    auto it = workers_.find(rank);
    if (it != workers_.end()) previous = it->second;
  }
  if (previous.has_value()) {
    if (previous->address == worker.address && previous->pid == worker.pid) {
      return grpc::Status::OK;  // the same worker retrying
    }
    // Probe without the lock: a live duplicate is refused, a dead predecessor is replaced.
    if (probe_(previous->address)) {
      LogWarning(kLog, "refused rank %d from %s: rank held by live %s", rank, Describe(worker),
                 Describe(*previous));
      return grpc::Status(
          grpc::StatusCode::ALREADY_EXISTS,
          absl::StrCat("rank ", rank, " is already registered by ", previous->address,
                       ", which still answers; refusing ", worker.address));
    }
    LogWarning(kLog, "rank %d re-registered at %s; previous %s does not answer", rank,
               Describe(worker), Describe(*previous));
  } else {
    LogInfo(kLog, "rank %d registered at %s", rank, Describe(worker));
  }
  absl::MutexLock lock(&mutex_);
  workers_[rank] = std::move(worker);
  return grpc::Status::OK;
}

void ClusterServiceImpl::SetLeaveHandler(LeaveHandler handler) {
  absl::MutexLock lock(&mutex_);
  leave_handler_ = std::move(handler);
}

grpc::Status ClusterServiceImpl::Leave(grpc::ServerContext* context,
                                       const v1::LeaveRequest* request,
                                       v1::LeaveResponse* response) {
  if (grpc::Status s = CheckClusterToken(*context, "ClusterService.Leave"); !s.ok()) return s;
  LeaveHandler handler;
  {
    absl::MutexLock lock(&mutex_);
    const auto it = workers_.find(request->rank());
    if (it == workers_.end() || it->second.address != request->address() ||
        it->second.pid != request->pid()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat("rank ", request->rank(), " at ", request->address(),
                                       " is not a registered worker of this cluster"));
    }
    handler = leave_handler_;
  }
  LogInfo(kLog, "rank %d at %s is leaving: draining the group for it", request->rank(),
          request->address());
  response->set_drained(handler == nullptr || handler(request->rank()));
  return grpc::Status::OK;
}

grpc::Status ClusterServiceImpl::StoreSet(grpc::ServerContext* context,
                                          const v1::StoreSetRequest* request,
                                          v1::StoreSetResponse* response) {
  if (grpc::Status s = CheckClusterToken(*context, "ClusterService.StoreSet"); !s.ok()) return s;
  if (request->key().size() > kMaxStoreKeyBytes || request->value().size() > kMaxStoreValueBytes) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("StoreSet: keys hold at most ", kMaxStoreKeyBytes,
                                     " bytes and values ", kMaxStoreValueBytes));
  }
  absl::MutexLock lock(&mutex_);
  const auto it = store_.find(request->key());
  const int64_t replaced = it == store_.end() ? 0 : it->first.size() + it->second.size();
  const int64_t added = request->key().size() + request->value().size();
  if ((it == store_.end() && store_.size() >= kMaxStoreKeys) ||
      store_bytes_ - replaced + added > kMaxStoreBytes) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat("StoreSet: the rendezvous store holds at most ", kMaxStoreKeys,
                                     " keys and ", kMaxStoreBytes, " bytes"));
  }
  store_bytes_ += added - replaced;
  store_[request->key()] = request->value();
  return grpc::Status::OK;
}

void ClusterServiceImpl::ClearGroup(const std::string& group_id) {
  const std::string prefix = absl::StrCat(group_id, "/");
  absl::MutexLock lock(&mutex_);
  for (auto it = store_.begin(); it != store_.end();) {
    if (absl::StartsWith(it->first, prefix)) {
      store_bytes_ -= it->first.size() + it->second.size();
      store_.erase(it++);
    } else {
      ++it;
    }
  }
}

grpc::Status ClusterServiceImpl::StoreGet(grpc::ServerContext* context,
                                          const v1::StoreGetRequest* request,
                                          v1::StoreGetResponse* response) {
  if (grpc::Status s = CheckClusterToken(*context, "ClusterService.StoreGet"); !s.ok()) return s;
  const absl::Duration timeout = request->timeout_ms() > 0
                                     ? absl::Milliseconds(request->timeout_ms())
                                     : kDefaultStoreGetTimeout;
  const absl::Time deadline =
      std::min(absl::Now() + timeout, absl::FromChrono(context->deadline()));
  const std::string& key = request->key();
  auto present = [this, &key]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return store_.contains(key); };
  absl::MutexLock lock(&mutex_);
  while (!present()) {
    if (context->IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED,
                          absl::StrCat("store get '", key, "' cancelled by the caller"));
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return grpc::Status(
          grpc::StatusCode::DEADLINE_EXCEEDED,
          absl::StrCat("store key '", key, "' was not set within ", absl::FormatDuration(timeout)));
    }
    mutex_.AwaitWithDeadline(absl::Condition(&present), std::min(deadline, now + kPollInterval));
  }
  response->set_value(store_.at(key));
  return grpc::Status::OK;
}

absl::StatusOr<std::vector<RegisteredWorker>> ClusterServiceImpl::WaitForAllRanks(
    absl::Time deadline, const absl::Notification* stop) {
  auto all = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return static_cast<int>(workers_.size()) == world_size_;
  };
  absl::MutexLock lock(&mutex_);
  while (!all()) {
    if (stop != nullptr && stop->HasBeenNotified()) {
      return absl::CancelledError("stopped while waiting for workers to register");
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("ranks ", MissingRanksLocked(), " of ",
                                                      world_size_, " did not register in time"));
    }
    mutex_.AwaitWithDeadline(absl::Condition(&all), std::min(deadline, now + kPollInterval));
  }
  return RegisteredLocked();
}

std::vector<RegisteredWorker> ClusterServiceImpl::Registered() const {
  absl::MutexLock lock(&mutex_);
  return RegisteredLocked();
}

std::vector<RegisteredWorker> ClusterServiceImpl::RegisteredLocked() const {
  std::vector<RegisteredWorker> workers;
  for (const auto& [rank, worker] : workers_) workers.push_back(worker);
  return workers;
}

std::string ClusterServiceImpl::MissingRanks() const {
  absl::MutexLock lock(&mutex_);
  return MissingRanksLocked();
}

std::string ClusterServiceImpl::MissingRanksLocked() const {
  std::vector<int> missing;
  for (int rank = 0; rank < world_size_; ++rank) {
    if (!workers_.contains(rank)) missing.push_back(rank);
  }
  return absl::StrJoin(missing, ", ");
}

}  // namespace tpserve
