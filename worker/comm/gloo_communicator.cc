#include "worker/comm/gloo_communicator.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>
#include <signal.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "worker/comm/gloo_status.h"
#include "worker/comm/group_arguments.h"

namespace tpserve {
namespace {

std::chrono::milliseconds ToMillis(absl::Duration d) { return absl::ToChronoMilliseconds(d); }

// Gloo writes with writev(2), which raises SIGPIPE when a peer has gone away; at its default
// disposition that kills the process instead of surfacing as an error. Ignore it unless the
// program has installed its own handler.
void IgnoreSigpipeIfDefault() {
  struct sigaction current = {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
}

// connectFullMesh names rank r's keys "rank_<r>" and "<r>"; map a key back to the rank.
std::string DescribeKeys(const std::vector<std::string>& keys) {
  std::vector<std::string> parts;
  for (const std::string& key : keys) {
    absl::string_view digits = key;
    absl::ConsumePrefix(&digits, "rank_");
    const bool is_rank = !digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
    parts.push_back(is_rank ? absl::StrCat("rank ", digits, " (key '", key, "')")
                            : absl::StrCat("key '", key, "'"));
  }
  return absl::StrJoin(parts, ", ");
}

// Holds every store access of one rendezvous to a single deadline. Needed because
// connectFullMesh calls Store::get(), which waits with the store's own default (30 s for
// FileStore) rather than the context's timeout, and because each wait would otherwise get the
// full timeout again.
class DeadlineStore : public gloo::rendezvous::Store {
 public:
  DeadlineStore(gloo::rendezvous::Store& inner, absl::Time deadline)
      : inner_(inner), deadline_(deadline) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    inner_.set(key, data);
  }

  std::vector<char> get(const std::string& key) override {
    wait({key});
    return inner_.get(key);
  }

  void wait(const std::vector<std::string>& keys) override { WaitUntilDeadline(keys); }

  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    WaitUntilDeadline(keys);  // Callers pass the context timeout; the overall deadline is tighter.
  }

 private:
  void WaitUntilDeadline(const std::vector<std::string>& keys) {
    const absl::Duration left = deadline_ - absl::Now();
    // Never hand the store 0 ms: Gloo reads that as "no timeout".
    if (left >= absl::Milliseconds(1)) {
      try {
        inner_.wait(keys, ToMillis(left));
        return;
      } catch (const gloo::IoException&) {
        // A store timeout; reported below with the rank that is missing.
      }
    }
    throw gloo::IoException(
        absl::StrCat("timed out waiting for ", DescribeKeys(keys), " to join the rendezvous"));
  }

  gloo::rendezvous::Store& inner_;
  const absl::Time deadline_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Create(
    int rank, int world_size, std::shared_ptr<gloo::rendezvous::Store> store,
    const GlooOptions& options) {
  if (absl::Status s = CheckGroupArguments("GlooCommunicator", rank, world_size, store.get(),
                                           options.connect_timeout, options.operation_timeout);
      !s.ok()) {
    return s;
  }

  IgnoreSigpipeIfDefault();
  const absl::Time deadline = absl::Now() + options.connect_timeout;
  std::shared_ptr<gloo::rendezvous::Context> context;
  const absl::Status status = RunCatching(
      absl::StrCat("GlooCommunicator rank ", rank, " of ", world_size, ": connecting on ",
                   options.interface.empty() ? options.host : options.interface,
                   " (connect timeout ", absl::FormatDuration(options.connect_timeout), ")"),
      [&] {
        gloo::transport::tcp::attr attr;
        if (options.interface.empty()) {
          attr.hostname = options.host;
        } else {
          attr.iface = options.interface;
        }
        std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
        context = std::make_shared<gloo::rendezvous::Context>(rank, world_size);
        context->setTimeout(ToMillis(options.connect_timeout));
        DeadlineStore bounded(*store, deadline);
        context->connectFullMesh(bounded, device);
        context->setTimeout(ToMillis(options.operation_timeout));
      });
  if (!status.ok()) return status;
  return std::unique_ptr<GlooCommunicator>(
      new GlooCommunicator(rank, world_size, std::move(context), options.operation_timeout));
}

GlooCommunicator::GlooCommunicator(int rank, int world_size, std::shared_ptr<gloo::Context> context,
                                   absl::Duration operation_timeout)
    : rank_(rank),
      world_size_(world_size),
      context_(std::move(context)),
      operation_timeout_(operation_timeout) {}

GlooCommunicator::~GlooCommunicator() = default;

template <typename Fn>
absl::Status GlooCommunicator::Guarded(const char* op, Fn&& fn) {
  if (!error_.ok()) return error_;
  const std::string context =
      absl::StrCat("GlooCommunicator rank ", rank_, " of ", world_size_, ": ", op, " failed");
  error_ = RunCatching(context, std::forward<Fn>(fn));
  if (error_.ok()) return error_;
  {
    absl::MutexLock lock(&abort_mutex_);
    if (!aborted_.ok()) {
      error_ = absl::UnavailableError(absl::StrCat(context, ": abandoned: ", aborted_.message()));
    }
  }
  // A peer waiting for this rank's part would otherwise wait out its operation timeout.
  RunCatching(context, [&] { context_->closeConnections(); }).IgnoreError();
  return error_;
}

GlooCommunicator::Watching::Watching(GlooCommunicator* comm,
                                     std::initializer_list<gloo::transport::UnboundBuffer*> buffers)
    : comm_(comm) {
  absl::MutexLock lock(&comm_->abort_mutex_);
  if (!comm_->aborted_.ok()) throw gloo::IoException("abandoned before it started");
  comm_->watched_.assign(buffers.begin(), buffers.end());
}

GlooCommunicator::Watching::~Watching() {
  absl::MutexLock lock(&comm_->abort_mutex_);
  comm_->watched_.clear();
}

void GlooCommunicator::Abort(absl::string_view reason) {
  absl::MutexLock lock(&abort_mutex_);
  if (!aborted_.ok()) return;
  aborted_ = absl::UnavailableError(reason);
  // The flags are sticky: a wait that has not begun yet returns at once too.
  for (gloo::transport::UnboundBuffer* buffer : watched_) {
    buffer->abortWaitRecv();
    buffer->abortWaitSend();
  }
}

absl::Status GlooCommunicator::AllReduceSum(float* data, int64_t count) {
  if (count < 0) {
    return absl::InvalidArgumentError(absl::StrCat("AllReduceSum: negative count ", count));
  }
  if (count == 0 || world_size_ == 1) return error_;
  return Guarded("AllReduceSum", [&] {
    // Reduce-scatter then all-gather in point-to-point messages: rank r sums slice r of every
    // rank's floats in rank order, (x_0 + x_1) + x_2 + ..., and sends the result to the others.
    // Every element is that same sum whatever the count and whichever rank computes it, so a
    // step's results do not depend on its batch (Gloo's ring adds in an order that follows the
    // message size). Traffic per rank is the ring's, 2 (n - 1) / n of the buffer, in two rounds
    // of parallel messages instead of 2 (n - 1) sequential hops.
    const int n = world_size_;
    const auto slice_begin = [&](int r) { return count * r / n; };
    const int64_t begin = slice_begin(rank_);
    const int64_t len = slice_begin(rank_ + 1) - begin;
    const auto deadline = std::chrono::steady_clock::now() + ToMillis(operation_timeout_);
    const uint64_t scatter_slot = gloo::Slot::build(gloo::kAllreduceSlotPrefix, /*tag=*/1);
    const uint64_t gather_slot = gloo::Slot::build(gloo::kAllreduceSlotPrefix, /*tag=*/2);
    auto buffer = context_->createUnboundBuffer(data, count * sizeof(float));
    staging_.resize(std::max<int64_t>(1, n * len));
    auto staging = context_->createUnboundBuffer(staging_.data(), staging_.size() * sizeof(float));
    const Watching watching(this, {buffer.get(), staging.get()});
    int sends = 0, recvs = 0;
    for (int p = 0; p < n; ++p) {
      const int64_t p_len = slice_begin(p + 1) - slice_begin(p);
      if (p == rank_) continue;
      if (p_len > 0) {
        buffer->send(p, scatter_slot, slice_begin(p) * sizeof(float), p_len * sizeof(float));
        ++sends;
      }
      if (len > 0) {
        staging->recv(p, scatter_slot, p * len * sizeof(float), len * sizeof(float));
        ++recvs;
      }
    }
    for (; recvs > 0; --recvs) {
      if (!staging->waitRecv(deadline)) throw gloo::IoException("reduce-scatter receive aborted");
    }
    // Phase two receives into the slices phase one is still sending from.
    for (; sends > 0; --sends) {
      if (!buffer->waitSend(deadline)) throw gloo::IoException("reduce-scatter send aborted");
    }
    if (len > 0) {
      std::memcpy(staging_.data() + rank_ * len, data + begin, len * sizeof(float));
      float* out = data + begin;
      std::memcpy(out, staging_.data(), len * sizeof(float));
      for (int q = 1; q < n; ++q) {
        const float* in = staging_.data() + q * len;
        for (int64_t i = 0; i < len; ++i) out[i] += in[i];
      }
    }
    for (int p = 0; p < n; ++p) {
      const int64_t p_len = slice_begin(p + 1) - slice_begin(p);
      if (p == rank_) continue;
      if (len > 0) {
        buffer->send(p, gather_slot, begin * sizeof(float), len * sizeof(float));
        ++sends;
      }
      if (p_len > 0) {
        buffer->recv(p, gather_slot, slice_begin(p) * sizeof(float), p_len * sizeof(float));
        ++recvs;
      }
    }
    for (; recvs > 0; --recvs) {
      if (!buffer->waitRecv(deadline)) throw gloo::IoException("all-gather receive aborted");
    }
    for (; sends > 0; --sends) {
      if (!buffer->waitSend(deadline)) throw gloo::IoException("all-gather send aborted");
    }
  });
}

absl::Status GlooCommunicator::GatherToRoot(const float* send, absl::Span<const int64_t> counts,
                                            float* recv) {
  if (absl::Status s = CheckGatherCounts(counts, world_size_); !s.ok()) return s;
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  return Guarded("GatherToRoot", [&] {
    // The slot Gloo's own gather/gatherv use; messages on one slot match in issue order.
    const uint64_t slot = gloo::Slot::build(gloo::kGatherSlotPrefix, /*tag=*/0);
    const auto deadline = std::chrono::steady_clock::now() + ToMillis(operation_timeout_);
    if (rank_ != 0) {
      if (counts[rank_] == 0) return;
      auto in =
          context_->createUnboundBuffer(const_cast<float*>(send), counts[rank_] * sizeof(float));
      const Watching watching(this, {in.get()});
      in->send(/*dstRank=*/0, slot);
      if (!in->waitSend(deadline)) throw gloo::IoException("send to rank 0 was aborted");
      return;
    }
    if (total == 0) return;
    if (counts[0] > 0) std::memcpy(recv, send, counts[0] * sizeof(float));
    auto out = context_->createUnboundBuffer(recv, total * sizeof(float));
    const Watching watching(this, {out.get()});
    int pending = 0;
    size_t offset = counts[0] * sizeof(float);
    for (int r = 1; r < world_size_; ++r) {
      const size_t bytes = counts[r] * sizeof(float);
      if (bytes > 0) {
        out->recv(r, slot, offset, bytes);
        ++pending;
      }
      offset += bytes;
    }
    for (; pending > 0; --pending) {
      if (!out->waitRecv(deadline)) throw gloo::IoException("receive on rank 0 was aborted");
    }
  });
}

}  // namespace tpserve
