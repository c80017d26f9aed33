#include "worker/comm/shm_communicator.h"

#include <gloo/rendezvous/store.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "worker/comm/gloo_status.h"
#include "worker/comm/group_arguments.h"
#include "worker/comm/shm_segment.h"

namespace tpserve {
namespace {

// One barrier for messages up to this size: every rank then reads n× the message, which at this
// size costs less than a second barrier (measured in docs/PERFORMANCE.md).
constexpr int64_t kOneRoundMaxBytes = 64 << 10;
// Sums are split at multiples of a cache line, so that no two ranks write one line.
constexpr int64_t kSliceAlignFloats = kLine / sizeof(float);
// How often a sleeping waiter looks for exited or departed ranks.
constexpr absl::Duration kLivenessPeriod = absl::Milliseconds(20);
// Pause instructions before sleeping: ~2 µs when every rank has a core of its own (a peer that
// is running arrives within that, and a futex round trip costs more), almost none otherwise.
constexpr int kSpinWithSpareCores = 64;
constexpr int kSpinOversubscribed = 4;

// A rank's barrier word: (barriers arrived at) << 1, bit 0 set once the rank has left the group.
// Counts wrap; comparisons are modular, ranks are never more than one barrier apart.
constexpr uint32_t kLeftBit = 1;

bool Reached(uint32_t word, uint32_t target) {
  return static_cast<int32_t>((word & ~kLeftBit) - (target << 1)) >= 0;
}

void CpuPause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// No FUTEX_PRIVATE_FLAG: the word is in a shared mapping, the waiter and waker in two processes.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, absl::Duration timeout) {
  const timespec ts = absl::ToTimespec(timeout);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Sets the word (seq_cst, paired with the waiter's seq_cst increment of `waiters` and re-load)
// and wakes the sleepers, if any, with one syscall.
void Publish(RankSlot& slot, uint32_t word) {
  slot.arrived.store(word);
  if (slot.waiters.load() > 0) FutexWakeAll(&slot.arrived);
}

int CpusAvailable() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return CPU_COUNT(&set);
}

// Store values are never empty (FileStore refuses to read an empty one).
std::string VoteKey(int rank) { return absl::StrCat("shm_vote_rank_", rank); }
constexpr char kVoteYes[] = "yes";
constexpr char kVoteNo[] = "no: ";  // followed by why
constexpr char kSegmentKey[] = "shm_segment";
constexpr char kNoSegment[] = "none";  // a name begins with '/'

}  // namespace

absl::StatusOr<std::unique_ptr<ShmCommunicator>> ShmCommunicator::Create(
    int rank, int world_size, std::shared_ptr<gloo::rendezvous::Store> store,
    const ShmOptions& options) {
  if (absl::Status s = CheckGroupArguments("ShmCommunicator", rank, world_size, store.get(),
                                           options.connect_timeout, options.operation_timeout);
      !s.ok()) {
    return s;
  }
  if (options.chunk_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShmCommunicator: chunk_bytes ", options.chunk_bytes, " is not positive"));
  }
  const std::string context = absl::StrCat("ShmCommunicator rank ", rank, " of ", world_size);
  const absl::Time deadline = absl::Now() + options.connect_timeout;
  const Layout layout(world_size, (options.chunk_bytes + kLine - 1) / kLine * kLine);

  auto set = [&](const std::string& key, const std::string& value) {
    return RunCatching(absl::StrCat(context, ": writing '", key, "' to the store"),
                       [&] { store->set(key, std::vector<char>(value.begin(), value.end())); });
  };
  // `key` as rank `from` wrote it, waiting for it until the connect deadline.
  auto get = [&](const std::string& key, int from) -> absl::StatusOr<std::string> {
    std::vector<char> value;
    const absl::Duration left = deadline - absl::Now();
    absl::Status status = absl::DeadlineExceededError("");
    if (left >= absl::Milliseconds(1)) {
      status = RunCatching(absl::StrCat(context, ": reading '", key, "' from the store"), [&] {
        store->wait({key}, absl::ToChronoMilliseconds(left));
        value = store->get(key);
      });
    }
    if (status.code() == absl::StatusCode::kDeadlineExceeded) {
      return absl::DeadlineExceededError(absl::StrCat(
          context, ": rank ", from, " did not join the shared-memory rendezvous within ",
          absl::FormatDuration(options.connect_timeout)));
    }
    if (!status.ok()) return status;
    return std::string(value.begin(), value.end());
  };

  absl::StatusOr<std::unique_ptr<ShmSegment>> segment =
      absl::FailedPreconditionError("declined shared memory");
  if (rank == 0) {
    if (!options.decline) segment = ShmSegment::Create(layout);
    if (absl::Status s = set(kSegmentKey, segment.ok() ? (*segment)->published() : kNoSegment);
        !s.ok()) {
      return s;
    }
  } else {
    absl::StatusOr<std::string> published = get(kSegmentKey, 0);
    if (!published.ok()) return published.status();
    if (*published == kNoSegment) {
      segment = absl::FailedPreconditionError("rank 0 made no segment");
    } else if (!options.decline) {
      segment = ShmSegment::Open(*published, layout);
    }
  }
  if (segment.ok()) {
    if (absl::Status claimed = (*segment)->Claim(rank); !claimed.ok()) {
      segment = claimed;
    } else {
      (*segment)->slot(rank).pid = getpid();
    }
  }
  const std::string vote =
      segment.ok() ? kVoteYes : absl::StrCat(kVoteNo, segment.status().message());
  if (absl::Status s = set(VoteKey(rank), vote); !s.ok()) return s;

  std::string refusal;
  for (int r = 0; r < world_size; ++r) {
    absl::StatusOr<std::string> their = get(VoteKey(r), r);
    if (!their.ok()) return their.status();
    if (refusal.empty() && *their != kVoteYes) {
      refusal = absl::StrCat("rank ", r, ": ", absl::StripPrefix(*their, kVoteNo));
    }
  }
  if (segment.ok()) (*segment)->Unlink();  // every rank that could map it has
  if (!refusal.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(context, ": shared memory is not usable for this group (", refusal, ")"));
  }
  std::unique_ptr<ShmCommunicator> comm(
      new ShmCommunicator(rank, world_size, options, *std::move(segment)));
  // A segment that every rank mapped but whose writes some rank cannot see would hang the first
  // collective; find out now, within the connect deadline.
  if (absl::Status s = comm->Barrier("connect", deadline, options.connect_timeout); !s.ok()) {
    return s;
  }
  return comm;
}

ShmCommunicator::ShmCommunicator(int rank, int world_size, const ShmOptions& options,
                                 std::unique_ptr<ShmSegment> segment)
    : rank_(rank),
      world_size_(world_size),
      operation_timeout_(options.operation_timeout),
      chunk_floats_(segment->layout().chunk_bytes / static_cast<int64_t>(sizeof(float))),
      segment_(std::move(segment)),
      spin_iterations_(CpusAvailable() >= world_size ? kSpinWithSpareCores : kSpinOversubscribed) {}

ShmCommunicator::~ShmCommunicator() { Leave(); }

std::string ShmCommunicator::Context(const char* op) const {
  return absl::StrCat("ShmCommunicator rank ", rank_, " of ", world_size_, ": ", op, " failed");
}

const std::string& ShmCommunicator::segment_name() const { return segment_->name(); }

float* ShmCommunicator::In(uint32_t barrier, int rank) const {
  return segment_->at(segment_->layout().in_offset(barrier & 1, rank));
}

float* ShmCommunicator::Out(uint32_t barrier) const {
  return segment_->at(segment_->layout().out_offset(barrier & 1));
}

void ShmCommunicator::Leave() {
  RankSlot& mine = segment_->slot(rank_);
  Publish(mine, mine.arrived.load() | kLeftBit);
}

void ShmCommunicator::Abort(absl::string_view reason) {
  absl::MutexLock lock(&abort_mutex_);
  if (aborted_.load()) return;
  abort_reason_ = std::string(reason);
  aborted_.store(true, std::memory_order_release);
}

absl::Status ShmCommunicator::Fail(absl::Status status) {
  error_ = std::move(status);
  Leave();
  return error_;
}

absl::Status ShmCommunicator::CheckPending(const char* op, uint32_t target) {
  for (int r = 0; r < world_size_; ++r) {
    if (r == rank_) continue;
    const RankSlot& slot = segment_->slot(r);
    const uint32_t word = slot.arrived.load(std::memory_order_acquire);
    if (Reached(word, target)) continue;
    if (word & kLeftBit) {
      return absl::UnavailableError(absl::StrCat(Context(op), ": rank ", r, " has left the group"));
    }
    // It may have arrived just before it exited.
    if (!segment_->Alive(r) && !Reached(slot.arrived.load(), target)) {
      return absl::UnavailableError(
          absl::StrCat(Context(op), ": rank ", r, " (pid ", slot.pid, ") has exited"));
    }
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::CheckNoneLeft(const char* op) {
  for (int r = 0; r < world_size_; ++r) {
    if (r != rank_ && (segment_->slot(r).arrived.load(std::memory_order_acquire) & kLeftBit)) {
      return absl::UnavailableError(absl::StrCat(Context(op), ": rank ", r, " has left the group"));
    }
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::WaitFor(const char* op, int peer, uint32_t target,
                                      absl::Time deadline, absl::Duration timeout) {
  RankSlot& slot = segment_->slot(peer);
  for (int i = 0; i < spin_iterations_; ++i) {
    if (Reached(slot.arrived.load(std::memory_order_acquire), target)) return absl::OkStatus();
    CpuPause();
  }
  for (;;) {
    slot.waiters.fetch_add(1);
    const uint32_t word = slot.arrived.load();
    if (Reached(word, target)) {
      slot.waiters.fetch_sub(1);
      return absl::OkStatus();
    }
    const absl::Duration left = deadline - absl::Now();
    if (left > absl::ZeroDuration() && !(word & kLeftBit)) {
      FutexWait(&slot.arrived, word, std::min(left, kLivenessPeriod));
    }
    slot.waiters.fetch_sub(1);
    if (Reached(slot.arrived.load(std::memory_order_acquire), target)) return absl::OkStatus();
    if (aborted_.load(std::memory_order_acquire)) {
      absl::MutexLock lock(&abort_mutex_);
      return absl::UnavailableError(absl::StrCat(Context(op), ": abandoned: ", abort_reason_));
    }
    if (absl::Status s = CheckPending(op, target); !s.ok()) return s;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          Context(op), ": rank ", peer, " did not arrive within ", absl::FormatDuration(timeout)));
    }
    if (absl::Status s = CheckNoneLeft(op); !s.ok()) return s;
  }
}

absl::Status ShmCommunicator::Barrier(const char* op, absl::Time deadline, absl::Duration timeout) {
  const uint32_t target = ++barrier_;
  Publish(segment_->slot(rank_), target << 1);
  for (int r = 0; r < world_size_; ++r) {
    if (r == rank_) continue;
    if (absl::Status s = WaitFor(op, r, target, deadline, timeout); !s.ok())
      return Fail(std::move(s));
  }
  return absl::OkStatus();
}

namespace {

// dst[i] = ((src[0][i] + src[1][i]) + src[2][i]) + ..., for n >= 1.
void SumInRankOrder(float* __restrict dst, const float* const* src, int n, int64_t len) {
  if (n == 1) {
    std::memcpy(dst, src[0], len * sizeof(float));
    return;
  }
  const float* __restrict a = src[0];
  const float* __restrict b = src[1];
  for (int64_t i = 0; i < len; ++i) dst[i] = a[i] + b[i];
  for (int r = 2; r < n; ++r) {
    const float* __restrict c = src[r];
    for (int64_t i = 0; i < len; ++i) dst[i] += c[i];
  }
}

}  // namespace

absl::Status ShmCommunicator::AllReduceSum(float* data, int64_t count) {
  if (count < 0) {
    return absl::InvalidArgumentError(absl::StrCat("AllReduceSum: negative count ", count));
  }
  if (!error_.ok() || count == 0 || world_size_ == 1) return error_;
  constexpr char kOp[] = "AllReduceSum";
  const absl::Time deadline = absl::Now() + operation_timeout_;
  std::vector<const float*> src(world_size_);
  const int64_t bytes = count * static_cast<int64_t>(sizeof(float));
  if (count <= chunk_floats_ && bytes <= kOneRoundMaxBytes) {
    const uint32_t barrier = barrier_ + 1;
    std::memcpy(In(barrier, rank_), data, bytes);
    if (absl::Status s = Barrier(kOp, deadline, operation_timeout_); !s.ok()) return s;
    for (int r = 0; r < world_size_; ++r) src[r] = In(barrier, r);
    SumInRankOrder(data, src.data(), world_size_, count);
    return absl::OkStatus();
  }
  const int64_t chunks = (count + chunk_floats_ - 1) / chunk_floats_;
  auto chunk_len = [&](int64_t c) { return std::min(chunk_floats_, count - c * chunk_floats_); };
  for (int64_t c = 0; c <= chunks; ++c) {
    const uint32_t barrier = barrier_ + 1;
    if (c < chunks) {
      std::memcpy(In(barrier, rank_), data + c * chunk_floats_, chunk_len(c) * sizeof(float));
    }
    if (absl::Status s = Barrier(kOp, deadline, operation_timeout_); !s.ok()) return s;
    if (c > 0) {  // every rank's slice of the previous chunk is summed
      std::memcpy(data + (c - 1) * chunk_floats_, Out(barrier - 1),
                  chunk_len(c - 1) * sizeof(float));
    }
    if (c == chunks) break;
    const int64_t len = chunk_len(c);
    const int64_t per_rank = ((len + world_size_ - 1) / world_size_ + kSliceAlignFloats - 1) /
                             kSliceAlignFloats * kSliceAlignFloats;
    const int64_t begin = std::min(len, rank_ * per_rank);
    const int64_t end = std::min(len, begin + per_rank);
    for (int r = 0; r < world_size_; ++r) src[r] = In(barrier, r) + begin;
    SumInRankOrder(Out(barrier) + begin, src.data(), world_size_, end - begin);
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::BroadcastBytes(std::string* bytes, bool await_root) {
  if (!error_.ok() || world_size_ == 1) return error_;
  const int64_t chunk = chunk_floats_ * static_cast<int64_t>(sizeof(float));
  uint64_t size = rank_ == 0 ? bytes->size() : 0;
  uint64_t done = 0;
  for (int64_t piece = 0; piece == 0 || done < size; ++piece) {
    char* buffer = reinterpret_cast<char*>(In(barrier_ + 1, 0));
    const int64_t header = piece == 0 ? sizeof(size) : 0;
    auto piece_bytes = [&] { return std::min<uint64_t>(chunk - header, size - done); };
    if (rank_ == 0) {
      if (piece == 0) std::memcpy(buffer, &size, sizeof(size));
      std::memcpy(buffer + header, bytes->data() + done, piece_bytes());
    }
    const absl::Duration wait =
        piece == 0 && await_root ? absl::InfiniteDuration() : operation_timeout_;
    if (absl::Status s = Barrier("BroadcastBytes", absl::Now() + wait, wait); !s.ok()) return s;
    if (rank_ != 0) {
      if (piece == 0) {
        std::memcpy(&size, buffer, sizeof(size));
        bytes->resize(size);
      }
      std::memcpy(bytes->data() + done, buffer + header, piece_bytes());
    }
    done += piece_bytes();
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::GatherToRoot(const float* send, absl::Span<const int64_t> counts,
                                           float* recv) {
  if (absl::Status s = CheckGatherCounts(counts, world_size_); !s.ok()) return s;
  const int64_t longest = *std::max_element(counts.begin(), counts.end());
  if (!error_.ok()) return error_;
  const absl::Time deadline = absl::Now() + operation_timeout_;
  auto piece = [&](int r, int64_t p) {
    return std::clamp<int64_t>(counts[r] - p * chunk_floats_, 0, chunk_floats_);
  };
  const int64_t pieces = (longest + chunk_floats_ - 1) / chunk_floats_;
  for (int64_t p = 0; p < pieces; ++p) {
    const uint32_t barrier = barrier_ + 1;
    if (rank_ != 0 && piece(rank_, p) > 0) {
      std::memcpy(In(barrier, rank_), send + p * chunk_floats_, piece(rank_, p) * sizeof(float));
    }
    if (absl::Status s = Barrier("GatherToRoot", deadline, operation_timeout_); !s.ok()) return s;
    if (rank_ != 0) continue;
    int64_t offset = 0;
    for (int r = 0; r < world_size_; ++r) {
      const float* from = r == 0 ? send + p * chunk_floats_ : In(barrier, r);
      std::memcpy(recv + offset + p * chunk_floats_, from, piece(r, p) * sizeof(float));
      offset += counts[r];
    }
  }
  return absl::OkStatus();
}

}  // namespace tpserve
