// What the `tpserve` launcher shows its user, apart from the processes' logs: by default every
// log line (the launcher's own, the coordinator's, the workers') goes to one file, and the
// terminal gets only where the cluster listens, one progress line while the shards load, the
// answer to --prompt and one line on exit.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tpserve/v1/inference.pb.h"

namespace tpserve {

struct Console {
  FILE* out = stdout;
  FILE* err = stderr;
  std::string log_file;  // empty: the logs stream to stderr (-v)
};

// Sends this process's stdout and stderr, and so every child's it starts from now on, to
// `log_file` (truncated, then appended to by all). Returns the terminal's streams.
absl::StatusOr<Console> RedirectLogs(const std::string& log_file);

// "52.3 MB", "4.92 GB".
std::string FormatBytes(int64_t bytes);

// The line that shows the shards loading. On a terminal it is rewritten in place as the figures
// change; elsewhere (a pipe, a file) it is printed when loading ends, and every 10 s before.
class LoadProgressLine {
 public:
  LoadProgressLine(const Console& console, std::string what);
  // Ends a line left unfinished (the start failed), so that the error starts on its own.
  ~LoadProgressLine();

  // Each health answer while the cluster starts.
  void Update(const v1::HealthResponse& health);
  // The cluster serves: the line's final form.
  void Done();

 private:
  void Show(const std::string& text, bool final);

  FILE* const out_;
  const bool terminal_;
  const std::string what_;  // "models/M.gguf on 3 cpu workers"
  const absl::Time start_ = absl::Now();
  absl::Time last_print_ = absl::Now();
  int64_t done_ = 0;
  int64_t total_ = 0;
  size_t shown_width_ = 0;
  std::string shown_;
};

}  // namespace tpserve
