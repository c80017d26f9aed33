#include "cli/launcher_console.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tpserve {
namespace {

// Off a terminal, a line at most this often while loading: a long load still shows it moves.
constexpr absl::Duration kPipeInterval = absl::Seconds(10);

}  // namespace

absl::StatusOr<Console> RedirectLogs(const std::string& log_file) {
  const int log = open(log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot write the log file ", log_file, ": ",
                                                   std::strerror(errno),
                                                   " (--log-file PATH, or -v for stderr)"));
  }
  std::fflush(stdout);
  std::fflush(stderr);
  // The terminal's copies are close-on-exec: the children write to the log alone.
  const int out = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
  const int err = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
  if (out < 0 || err < 0 || dup2(log, STDOUT_FILENO) < 0 || dup2(log, STDERR_FILENO) < 0) {
    return absl::InternalError(absl::StrCat("cannot redirect the logs: ", std::strerror(errno)));
  }
  close(log);
  Console console;
  console.out = fdopen(out, "w");
  console.err = fdopen(err, "w");
  console.log_file = log_file;
  // Line by line: what the user reads must not wait in a buffer behind the cluster's start.
  setvbuf(console.out, nullptr, _IOLBF, 0);
  setvbuf(console.err, nullptr, _IONBF, 0);
  return console;
}

std::string FormatBytes(int64_t bytes) {
  if (bytes >= 1'000'000'000) return absl::StrFormat("%.2f GB", bytes / 1e9);
  return absl::StrFormat("%.1f MB", bytes / 1e6);
}

LoadProgressLine::LoadProgressLine(const Console& console, std::string what)
    : out_(console.out), terminal_(isatty(fileno(console.out)) == 1), what_(std::move(what)) {}

LoadProgressLine::~LoadProgressLine() {
  if (terminal_ && shown_width_ > 0) std::fputc('\n', out_);
}

void LoadProgressLine::Update(const v1::HealthResponse& health) {
  if (health.load_total_bytes() <= 0) {
    if (terminal_) Show(absl::StrCat("tpserve: loading ", what_, ": starting"), false);
    return;
  }
  done_ = health.load_done_bytes();
  total_ = health.load_total_bytes();
  if (health.state() == v1::HealthResponse::STATE_SERVING) return;  // Done() says it
  const std::string text =
      absl::StrFormat("tpserve: loading %s: %s of %s (%d%%)", what_, FormatBytes(done_),
                      FormatBytes(total_), static_cast<int>(100 * done_ / total_));
  if (terminal_ || absl::Now() - last_print_ >= kPipeInterval) Show(text, !terminal_);
}

void LoadProgressLine::Done() {
  const std::string size = total_ > 0 ? absl::StrCat(FormatBytes(total_), " (100%) ") : "";
  Show(absl::StrFormat("tpserve: loaded %s: %sin %.1f s; serving", what_, size,
                       absl::ToDoubleSeconds(absl::Now() - start_)),
       true);
}

void LoadProgressLine::Show(const std::string& text, bool final) {
  if (text == shown_ && !final) return;
  if (terminal_) {
    // Spaces over what a longer earlier text left.
    const size_t pad = shown_width_ > text.size() ? shown_width_ - text.size() : 0;
    std::fprintf(out_, "\r%s%s", text.c_str(), std::string(pad, ' ').c_str());
    if (final) std::fputc('\n', out_);
  } else {
    std::fprintf(out_, "%s\n", text.c_str());
  }
  std::fflush(out_);
  shown_ = text;
  shown_width_ = final ? 0 : text.size();
  last_print_ = absl::Now();
}

}  // namespace tpserve
