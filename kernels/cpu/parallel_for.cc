#include "kernels/cpu/parallel_for.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <mutex>
#include <thread>

#include "common/check.h"
#include "kernels/cpu/threads.h"

namespace tpserve::cpu {
namespace {

// How long an idle thread (or the caller, waiting for the last chunks) spins before it blocks:
// longer than the gap between two kernels of one step, far shorter than a scheduler slice.
constexpr auto kSpin = std::chrono::microseconds(50);

inline void Pause() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}

void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}

// Spins until done() holds (true) or kSpin has passed (false).
template <typename Done>
bool Spin(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (int i = 1;; ++i) {
    if (done()) return true;
    Pause();
    if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) return false;
  }
}

// The ticket holds everything a thread needs to claim a chunk of the current call: a claim is a
// compare-and-swap of the whole word, so whoever wins holds a chunk of the call that is running,
// whose function therefore stays valid until that chunk is done (a thread that slept through
// calls cannot claim for one that has ended: its ticket is exhausted or replaced).
//   bits 40-63: call number (mod 2^24)   bits 20-39: chunk count   bits 0-19: next chunk
constexpr int kChunkBits = 20;
constexpr uint64_t kChunkMask = (uint64_t{1} << kChunkBits) - 1;
constexpr int64_t kMaxChunks = (int64_t{1} << kChunkBits) - 1;

uint64_t Ticket(uint64_t call, uint64_t chunks) {
  return (call << (2 * kChunkBits)) | (chunks << kChunkBits);
}
uint64_t NextChunk(uint64_t ticket) { return ticket & kChunkMask; }
uint64_t ChunkCount(uint64_t ticket) { return (ticket >> kChunkBits) & kChunkMask; }

thread_local bool t_in_chunk = false;

class Pool {
 public:
  // Never destroyed: its threads sleep in a futex until the process exits.
  static Pool& Get() {
    static Pool* pool = new Pool();
    return *pool;
  }

  void Run(int64_t n, int64_t grain, absl::FunctionRef<void(int64_t, int64_t)> fn) {
    const int threads = CpuThreads();
    const int64_t chunks = (n + grain - 1) / grain;
    std::unique_lock<std::mutex> lock(call_mu_, std::try_to_lock);
    if (threads <= 1 || chunks <= 1 || t_in_chunk || !lock.owns_lock()) {
      RunInline(n, grain, fn);
      return;
    }
    while (static_cast<int>(workers_.size()) < threads - 1) {
      const int index = static_cast<int>(workers_.size());
      workers_.emplace_back([this, index] { WorkerLoop(index); });
      workers_.back().detach();
    }
    n_ = n;
    grain_ = grain;
    fn_ = &fn;
    participants_.store(threads - 1, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    ticket_.store(Ticket(++calls_ & ((uint64_t{1} << (64 - 2 * kChunkBits)) - 1),
                         static_cast<uint64_t>(chunks)),
                  std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) FutexWake(&generation_);

    RunClaimed();
    const uint32_t all = static_cast<uint32_t>(chunks);
    if (!Spin([&] { return done_.load(std::memory_order_acquire) == all; })) {
      caller_sleeping_.store(true, std::memory_order_seq_cst);
      for (uint32_t d; (d = done_.load(std::memory_order_seq_cst)) != all;) FutexWait(&done_, d);
      caller_sleeping_.store(false, std::memory_order_relaxed);
    }
  }

 private:
  Pool() = default;

  static void RunInline(int64_t n, int64_t grain, absl::FunctionRef<void(int64_t, int64_t)> fn) {
    for (int64_t begin = 0; begin < n; begin += grain) fn(begin, std::min(n, begin + grain));
  }

  // Claims and runs chunks of the current call until none is left.
  void RunClaimed() {
    for (uint64_t t = ticket_.load(std::memory_order_acquire);;) {
      if (NextChunk(t) >= ChunkCount(t)) return;
      if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel,
                                         std::memory_order_acquire)) {
        continue;
      }
      const int64_t begin = static_cast<int64_t>(NextChunk(t)) * grain_;
      t_in_chunk = true;
      (*fn_)(begin, std::min(n_, begin + grain_));
      t_in_chunk = false;
      if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == ChunkCount(t) &&
          caller_sleeping_.load(std::memory_order_seq_cst)) {
        FutexWake(&done_);
      }
      t = ticket_.load(std::memory_order_acquire);
    }
  }

  [[noreturn]] void WorkerLoop(int index) {
    uint32_t seen = generation_.load(std::memory_order_acquire);
    for (;;) {
      if (!Spin([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        while (generation_.load(std::memory_order_seq_cst) == seen) FutexWait(&generation_, seen);
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
      seen = generation_.load(std::memory_order_acquire);
      if (index < participants_.load(std::memory_order_relaxed)) RunClaimed();
    }
  }

  std::mutex call_mu_;                // one call at a time; others run inline
  std::vector<std::thread> workers_;  // guarded by call_mu_
  uint64_t calls_ = 0;                // guarded by call_mu_
  // The running call's, written before its ticket is published (release), read by a thread
  // only after it has claimed one of its chunks (acquire).
  int64_t n_ = 0;
  int64_t grain_ = 1;
  const absl::FunctionRef<void(int64_t, int64_t)>* fn_ = nullptr;
  std::atomic<int> participants_{0};
  std::atomic<uint64_t> ticket_{0};
  std::atomic<uint32_t> generation_{0};  // bumped per call; the idle threads' futex word
  std::atomic<uint32_t> done_{0};        // chunks of the running call done; the caller's futex word
  std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_sleeping_{false};
};

}  // namespace

int64_t FewChunksPerThread(int64_t n) { return std::max<int64_t>(1, n / (4 * CpuThreads())); }

void ParallelFor(int64_t n, int64_t grain, absl::FunctionRef<void(int64_t, int64_t)> fn) {
  TP_CHECK(n >= 0 && grain >= 1);
  if (n == 0) return;
  grain = std::max(grain, (n + kMaxChunks - 1) / kMaxChunks);
  Pool::Get().Run(n, grain, fn);
}

}  // namespace tpserve::cpu
