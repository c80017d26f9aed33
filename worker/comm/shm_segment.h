// The shared-memory segment a CPU group on one host all-reduces through (ShmCommunicator): its
// layout, the control words at its start, and one rank's mapping of it.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace tpserve {

inline constexpr int64_t kLine = 64;
inline constexpr int64_t kPage = 4096;

struct alignas(kLine) RankSlot {
  std::atomic<uint32_t> arrived{0};  // the futex word
  std::atomic<uint32_t> waiters{0};  // ranks asleep, or about to sleep, on `arrived`
  int32_t pid = 0;                   // in the rank's own pid namespace, for messages only
};

struct alignas(kLine) SegmentHeader {
  uint64_t magic = 0;
  uint64_t token = 0;  // random, published with the name: the segment is the one rank 0 made
  int32_t world_size = 0;
  int64_t chunk_bytes = 0;
};

static_assert(std::atomic<uint32_t>::is_always_lock_free && sizeof(std::atomic<uint32_t>) == 4,
              "futex words must be plain 32-bit integers");

// [header][slots: world][pad to a page][in: 2 × world × chunk][out: 2 × chunk]. Staging and sum
// buffers alternate by barrier parity, so one barrier both publishes a chunk and proves that every
// rank has finished reading the buffers written two barriers earlier.
struct Layout {
  Layout(int world, int64_t chunk) : world_size(world), chunk_bytes(chunk) {}
  int64_t data_offset() const {
    const int64_t control = kLine + world_size * static_cast<int64_t>(sizeof(RankSlot));
    return (control + kPage - 1) / kPage * kPage;
  }
  int64_t in_offset(int parity, int rank) const {
    return data_offset() + (static_cast<int64_t>(parity) * world_size + rank) * chunk_bytes;
  }
  int64_t out_offset(int parity) const {
    return data_offset() + (2 * static_cast<int64_t>(world_size) + parity) * chunk_bytes;
  }
  int64_t total_bytes() const { return out_offset(2); }

  int world_size;
  int64_t chunk_bytes;
};

// One mapping of the segment. Rank 0's also owns the name until Unlink.
class ShmSegment {
 public:
  // Rank 0: a new segment under a random name, every page reserved.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Create(const Layout& layout);
  // The other ranks: the segment `published` names ("<name> <token as hex>"). The error message
  // says why not, as the rank's vote.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Open(const std::string& published,
                                                          const Layout& layout);
  ~ShmSegment() {
    Unlink();
    munmap(base_, layout_.total_bytes());
    close(fd_);  // releases this rank's lock
  }
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  void Unlink() {
    if (owns_name_) shm_unlink(name_.c_str());
    owns_name_ = false;
  }
  // Liveness without pids: rank r holds a write lock on byte r of the segment for as long as its
  // mapping lives. The lock belongs to the open file description, so the kernel drops it when the
  // process ends, however it ends (also in another pid namespace, and before it is reaped).
  absl::Status Claim(int rank) {
    struct flock lock = ByteOf(rank, F_WRLCK);
    if (fcntl(fd_, F_OFD_SETLK, &lock) != 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot lock byte ", rank, " of ", name_, ": ", strerror(errno)));
    }
    return absl::OkStatus();
  }
  // False once `rank`'s process has ended (or dropped its mapping); true while unsure.
  bool Alive(int rank) const {
    struct flock lock = ByteOf(rank, F_WRLCK);
    return fcntl(fd_, F_OFD_GETLK, &lock) != 0 || lock.l_type != F_UNLCK;
  }
  const std::string& name() const { return name_; }
  // What rank 0 publishes for the others to Open.
  std::string published() const {
    return absl::StrCat(name_, " ", absl::Hex(header().token, absl::kZeroPad16));
  }
  const Layout& layout() const { return layout_; }
  SegmentHeader& header() const { return *reinterpret_cast<SegmentHeader*>(base_); }
  RankSlot& slot(int rank) const { return reinterpret_cast<RankSlot*>(base_ + kLine)[rank]; }
  float* at(int64_t offset) const { return reinterpret_cast<float*>(base_ + offset); }

 private:
  ShmSegment(int fd, char* base, const Layout& layout, std::string name, bool owns_name)
      : fd_(fd), base_(base), layout_(layout), name_(std::move(name)), owns_name_(owns_name) {}

  static struct flock ByteOf(int rank, short type) {
    struct flock lock = {};
    lock.l_type = type;
    lock.l_whence = SEEK_SET;
    lock.l_start = rank;
    lock.l_len = 1;
    return lock;
  }

  const int fd_;  // kept open: it carries this rank's lock
  char* const base_;
  const Layout layout_;
  const std::string name_;
  bool owns_name_;
};

}  // namespace tpserve
