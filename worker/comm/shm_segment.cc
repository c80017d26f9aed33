#include "worker/comm/shm_segment.h"

#include <sys/random.h>
#include <sys/stat.h>

#include <new>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace tpserve {
namespace {

constexpr uint64_t kMagic = 0x31764d4853505400;  // "\0TPSHMv1"
constexpr char kNamePrefix[] = "/tpserve-";

absl::StatusOr<std::string> RandomBytes(size_t n) {
  std::string bytes(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = getrandom(bytes.data() + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return absl::InternalError(absl::StrCat("getrandom: ", strerror(errno)));
    got += r;
  }
  return bytes;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(const Layout& layout) {
  absl::StatusOr<std::string> random = RandomBytes(16 + sizeof(uint64_t));
  if (!random.ok()) return random.status();
  std::string name = absl::StrCat(kNamePrefix, absl::BytesToHexString(random->substr(0, 16)));
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot create ", name, ": ", strerror(errno)));
  }
  // Every page now: on a full /dev/shm a sparse segment would SIGBUS at first touch instead.
  const int reserve_error = posix_fallocate(fd, 0, layout.total_bytes());
  void* base = reserve_error != 0
                   ? MAP_FAILED
                   : mmap(nullptr, layout.total_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  if (base == MAP_FAILED) {
    close(fd);
    shm_unlink(name.c_str());
    return absl::ResourceExhaustedError(
        reserve_error != 0
            ? absl::StrCat("cannot reserve ", layout.total_bytes() >> 10, " KiB for ", name,
                           " in /dev/shm: ", strerror(reserve_error))
            : absl::StrCat("cannot map ", name, ": ", strerror(map_errno)));
  }
  std::unique_ptr<ShmSegment> segment(
      new ShmSegment(fd, static_cast<char*>(base), layout, std::move(name), /*owns_name=*/true));
  SegmentHeader* header = new (base) SegmentHeader;
  for (int r = 0; r < layout.world_size; ++r) new (&segment->slot(r)) RankSlot;
  std::memcpy(&header->token, random->data() + 16, sizeof(header->token));
  header->world_size = layout.world_size;
  header->chunk_bytes = layout.chunk_bytes;
  header->magic = kMagic;  // the store's hand-over of the name orders this before any reader
  return segment;
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Open(const std::string& published,
                                                             const Layout& layout) {
  const std::vector<std::string> parts = absl::StrSplit(published, ' ');
  uint64_t token = 0;
  if (parts.size() != 2 || !absl::StartsWith(parts[0], kNamePrefix) ||
      parts[0].find('/', 1) != std::string::npos || parts[1].size() != 16 ||
      !absl::SimpleHexAtoi(parts[1], &token)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank 0 published a malformed segment '", absl::CHexEscape(published), "'"));
  }
  const std::string& name = parts[0];
  const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot open ", name, ": ", strerror(errno),
                                               " (another host, or a /dev/shm of its own)"));
  }
  struct stat st = {};
  void* base = MAP_FAILED;
  std::string why;
  if (fstat(fd, &st) != 0 || st.st_size != layout.total_bytes()) {
    why = absl::StrCat(name, " has ", st.st_size, " bytes, want ", layout.total_bytes());
  } else if ((base = mmap(nullptr, layout.total_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                          0)) == MAP_FAILED) {
    why = absl::StrCat("cannot map ", name, ": ", strerror(errno));
  }
  if (base == MAP_FAILED) {
    close(fd);
    return absl::UnavailableError(why);
  }
  std::unique_ptr<ShmSegment> segment(
      new ShmSegment(fd, static_cast<char*>(base), layout, name, /*owns_name=*/false));
  const SegmentHeader& header = segment->header();
  if (header.magic != kMagic || header.token != token || header.world_size != layout.world_size ||
      header.chunk_bytes != layout.chunk_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, " is not the segment rank 0 made for this group"));
  }
  return segment;
}

}  // namespace tpserve
