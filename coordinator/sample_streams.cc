#include "coordinator/sample_streams.h"

#include <utility>

#include "common/check.h"

namespace tpserve {

SampleStreams::SampleStreams(std::vector<std::shared_ptr<RequestStream>> streams)
    : streams_(std::move(streams)), finished_(streams_.size(), false), remaining_(streams_.size()) {
  TP_CHECK(!streams_.empty());
}

std::optional<SampleStreams::News> SampleStreams::Next(absl::Duration timeout) {
  if (done()) return std::nullopt;
  const absl::Duration turn = timeout / static_cast<double>(remaining_);
  for (size_t k = 0; k < streams_.size(); ++k) {
    const size_t i = (next_ + k) % streams_.size();
    if (finished_[i]) continue;
    StreamUpdate update = streams_[i]->Wait(turn);
    if (update.token_ids.empty() && update.text.empty() && update.logprobs.empty() &&
        !update.done) {
      continue;
    }
    if (update.done) {
      finished_[i] = true;
      --remaining_;
    }
    next_ = i + 1;
    return News{static_cast<int32_t>(i), std::move(update)};
  }
  return std::nullopt;
}

void SampleStreams::CancelAll() {
  for (const std::shared_ptr<RequestStream>& stream : streams_) stream->Cancel();
}

}  // namespace tpserve
