#include "worker/forward_pass.h"

#include "common/status_macros.h"

namespace tpserve {

absl::Status ForwardPass::ForwardAndProcess(const ForwardBatch& batch,
                                            absl::Span<const LogitsRequest> requests,
                                            std::vector<LogitsResult>* results) {
  results->clear();
  RETURN_IF_ERROR(Forward(batch, &host_logits_));
  if (host_logits_.empty()) return absl::OkStatus();  // not the sampling rank
  const int64_t rows = batch.num_logits();
  return host_processor_.Process(host_logits_.data(), rows,
                                 static_cast<int64_t>(host_logits_.size()) / rows, requests,
                                 results);
}

}  // namespace tpserve
