// The n sample streams of one request, read together by a front end (gRPC Generate, HTTP with
// and without streaming): the next news of any unfinished sample, taking turns so that each is
// looked at often, and one cancellation for all.
//
// Not thread-safe: one front-end thread reads it (the engine writes the streams).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/request_stream.h"

namespace tpserve {

class SampleStreams {
 public:
  explicit SampleStreams(std::vector<std::shared_ptr<RequestStream>> streams);

  struct News {
    int32_t index;        // which sample
    StreamUpdate update;  // not empty: tokens, text, logprobs, or the end
  };
  // Waits up to `timeout` (split between the unfinished samples) for news of any of them, in
  // turn from the one after the last that had news; nullopt when there was none. A sample whose
  // update is `done` is finished and not read again.
  std::optional<News> Next(absl::Duration timeout);

  bool done() const { return remaining_ == 0; }  // every sample has finished
  void CancelAll();
  size_t size() const { return streams_.size(); }
  uint64_t request_id() const { return streams_.front()->request_id(); }

 private:
  const std::vector<std::shared_ptr<RequestStream>> streams_;
  std::vector<bool> finished_;
  size_t remaining_;
  size_t next_ = 0;  // where the next turn starts
};

}  // namespace tpserve
