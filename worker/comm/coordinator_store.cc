#include "worker/comm/coordinator_store.h"

#include <gloo/common/error.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/cluster_token.h"

namespace tpserve {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// One StoreGet asks the coordinator to wait at most this long, so that a coordinator restart or a
// server-side cap on waits costs one retry rather than the whole wait.
constexpr milliseconds kMaxWaitPerCall{10000};
// Slack on top of the server-side wait for the RPC's own deadline.
constexpr milliseconds kRpcSlack{5000};
constexpr milliseconds kRetryDelay{200};

std::chrono::system_clock::time_point RpcDeadline(milliseconds timeout) {
  return std::chrono::system_clock::now() + timeout + kRpcSlack;
}

std::string Describe(const grpc::Status& status) {
  return absl::StrCat("code ", static_cast<int>(status.error_code()), ": ", status.error_message());
}

}  // namespace

CoordinatorStore::CoordinatorStore(const std::string& coordinator_address,
                                   const std::string& group_id)
    : address_(coordinator_address),
      prefix_(absl::StrCat(group_id, "/")),
      stub_(v1::ClusterService::NewStub(ClusterChannel(coordinator_address))) {}

void CoordinatorStore::set(const std::string& key, const std::vector<char>& data) {
  v1::StoreSetRequest request;
  request.set_key(prefix_ + key);
  request.set_value(data.data(), data.size());
  v1::StoreSetResponse response;
  grpc::ClientContext context;
  context.set_deadline(RpcDeadline(milliseconds(0)));
  const grpc::Status status = stub_->StoreSet(&context, request, &response);
  if (!status.ok()) {
    throw gloo::IoException(absl::StrCat("coordinator store at ", address_, ": StoreSet('",
                                         request.key(), "') failed: ", Describe(status)));
  }
}

std::vector<char> CoordinatorStore::get(const std::string& key) {
  return Fetch(key, kDefaultTimeout);
}

void CoordinatorStore::wait(const std::vector<std::string>& keys) { wait(keys, kDefaultTimeout); }

void CoordinatorStore::wait(const std::vector<std::string>& keys, const milliseconds& timeout) {
  const bool unlimited = timeout == milliseconds::zero();
  const Clock::time_point deadline = Clock::now() + timeout;
  for (const std::string& key : keys) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    Fetch(key, unlimited ? milliseconds::zero() : std::max(left, milliseconds(1)));
  }
}

std::vector<char> CoordinatorStore::Fetch(const std::string& key, milliseconds timeout) {
  const bool unlimited = timeout == milliseconds::zero();
  const Clock::time_point deadline = Clock::now() + timeout;
  v1::StoreGetRequest request;
  request.set_key(prefix_ + key);
  grpc::Status status;
  while (true) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (!unlimited && left <= milliseconds::zero()) break;
    const milliseconds wait = unlimited ? kMaxWaitPerCall : std::min(left, kMaxWaitPerCall);
    request.set_timeout_ms(wait.count());
    v1::StoreGetResponse response;
    grpc::ClientContext context;
    context.set_deadline(RpcDeadline(wait));
    status = stub_->StoreGet(&context, request, &response);
    if (status.ok()) return std::vector<char>(response.value().begin(), response.value().end());
    const grpc::StatusCode code = status.error_code();
    if (code == grpc::StatusCode::UNAVAILABLE) {
      std::this_thread::sleep_for(kRetryDelay);  // The coordinator is (re)starting: try again.
    } else if (code != grpc::StatusCode::DEADLINE_EXCEEDED && code != grpc::StatusCode::NOT_FOUND) {
      throw gloo::IoException(absl::StrCat("coordinator store at ", address_, ": StoreGet('",
                                           request.key(), "') failed: ", Describe(status)));
    }
  }
  throw gloo::IoException(absl::StrCat("timed out after ", timeout.count(), "ms waiting for key '",
                                       request.key(), "' in the coordinator store at ", address_,
                                       " (last answer: ", Describe(status), ")"));
}

}  // namespace tpserve
