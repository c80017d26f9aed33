// Between logits and tokens on a CUDA device: worker/logits_processor.h's contract, with the
// logits rows in device memory, and only what LogitsResult needs copied back.
//
// Where each request runs:
//   on the device: a sampled request without return_logits and without penalties, whose drafts
//     (if any) are verified greedily (cpu::IsGreedy). Per row: the allow-list mask
//     (cuda::ApplyTokenBitmask), the pick (cuda::Sample: the argmax, or a draw with the CPU's
//     uniform number, std::uniform_real_distribution<double> over
//     mt19937_64(SampleStreamSeed(seed, output_len + k)), computed here on the host), and with
//     logprobs the pick's log-probability and the top tokens of the raw row (cuda::TokenLogprobs).
//     Back come [rows] token ids, and [rows] logprobs plus [rows, top] top tokens when asked.
//   on the host (CpuLogitsProcessor, over copies of that request's rows only): return_logits
//     (Score), penalties (they need the history), and sampling verification of drafts
//     (temperature > 0 with K > 0: rejection sampling needs the whole target distribution).
//   nowhere: a request that neither samples nor returns logits (a prefill chunk).
//
// Agreement with CpuLogitsProcessor on the same rows: greedy picks, masks and greedy draft
// acceptance are exact; a seeded draw is the CPU's token except where expf's rounding and the
// fixed-point sums move a cut (kernels/cuda/sampling.h), about 1e-7 of the mass per boundary;
// logprobs agree to float rounding of the log-sum.
//
// A step runs as Begin, one EnqueuePass per block of rows (the model's logits passes), Finish;
// Process does the three over rows already in one device buffer. One thread at a time.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/sampling.h"
#include "worker/logits_processor.h"

namespace tpserve::cuda {

class CudaLogitsProcessor final : public LogitsProcessor {
 public:
  // Buffers on the current device for passes of up to `max_pass_rows` rows and steps of up to
  // `max_step_rows` rows of `vocab` logits: device memory max_pass_rows · vocab · 4.125 bytes
  // (the rows and their masks) plus 168 bytes per step row. Work is enqueued on `stream`, which
  // must outlive this.
  static absl::StatusOr<std::unique_ptr<CudaLogitsProcessor>> Create(int64_t vocab,
                                                                     int64_t max_pass_rows,
                                                                     int64_t max_step_rows,
                                                                     cudaStream_t stream);

  // LogitsProcessor: `logits` [num_rows, vocab] in device memory; returns after the stream has
  // finished. INVALID_ARGUMENT for another vocab, or a step beyond the sizes of Create.
  absl::Status Process(const float* logits, int64_t num_rows, int64_t vocab,
                       absl::Span<const LogitsRequest> requests,
                       std::vector<LogitsResult>* results) override;

  // Starts a step of `num_rows` rows: which request runs where, and each device row's settings.
  // Requests were checked with CheckLogitsRequest and their spans stay valid until Finish.
  // INVALID_ARGUMENT when device requests share rows or have more rows than max_step_rows.
  absl::Status Begin(absl::Span<const LogitsRequest> requests, int64_t num_rows);
  // Rows [start, start + count) of the step, count <= max_pass_rows, as [count, vocab] at
  // `logits` on the device, unchanged until the stream has run what this enqueues. Every row
  // of the step is in exactly one pass. Host requests' rows are copied to host memory here.
  absl::Status EnqueuePass(const float* logits, int64_t start, int64_t count);
  // Copies the device rows' results back, waits for the stream, runs the host's requests, and
  // writes one result per request of Begin, in order.
  absl::Status Finish(std::vector<LogitsResult>* results);

 private:
  enum class Where { kNowhere, kDevice, kHost };

  CudaLogitsProcessor(int64_t vocab, int64_t max_pass_rows, int64_t max_step_rows,
                      cudaStream_t stream);

  // Constant after Create.
  const int64_t vocab_;
  const int64_t words_;  // BitmaskWords(vocab_)
  const int64_t max_pass_rows_;
  const int64_t max_step_rows_;
  const cudaStream_t stream_;
  DeviceBuffer<int32_t> pass_rows_;               // [max_pass_rows] rows of the pass's logits
  DeviceBuffer<SequenceSampling> pass_settings_;  // [max_pass_rows]
  DeviceBuffer<uint32_t> pass_mask_;              // [max_pass_rows, words]
  DeviceBuffer<float> work_;                      // [max_pass_rows, vocab] rows, masked
  DeviceBuffer<int32_t> tokens_;                  // [max_step_rows] each device row's pick
  DeviceBuffer<float> logprobs_;                  // [max_step_rows]
  DeviceBuffer<int32_t> top_ids_;                 // [max_step_rows, kMaxTopLogprobs]
  DeviceBuffer<float> top_logprobs_;              // [max_step_rows, kMaxTopLogprobs]

  // The step between Begin and Finish. Device rows are in ascending step row.
  absl::Span<const LogitsRequest> requests_;
  std::vector<Where> where_;                      // [requests]
  std::vector<int64_t> first_entry_;              // [requests] device: its row 0's device row
  std::vector<int64_t> entry_rows_;               // [device rows] step row
  std::vector<SequenceSampling> entry_settings_;  // [device rows]
  std::vector<const uint32_t*> entry_masks_;      // [device rows] mask row, or null
  int32_t top_ = 0;                               // top tokens per device row (0: none)
  bool want_logprobs_ = false;
  std::vector<LogitsRequest> host_requests_;  // the host's requests, rows into host_logits_
  std::vector<size_t> host_request_of_;       // [host requests] index into requests_
  std::vector<float> host_logits_;            // [host rows, vocab]
  CpuLogitsProcessor host_processor_;

  // Host staging, reused.
  std::vector<int32_t> staged_rows_;
  std::vector<uint32_t> staged_mask_;
  std::vector<int32_t> got_tokens_;
  std::vector<float> got_logprobs_;
  std::vector<int32_t> got_top_ids_;
  std::vector<float> got_top_logprobs_;
  std::vector<LogitsResult> host_results_;
};

}  // namespace tpserve::cuda
