#include "worker/cuda/cuda_logits_processor.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/cuda_check.h"
#include "common/status_macros.h"
#include "kernels/cpu/sampling.h"
#include "kernels/cuda/token_bitmask.h"
#include "kernels/cuda/token_logprobs.h"

namespace tpserve::cuda {
namespace {

static_assert(kMaxTopLogprobs == kMaxTokenLogprobsTop);

template <typename T>
absl::Status Allocate(DeviceBuffer<T>& buffer, int64_t count) {
  ASSIGN_OR_RETURN(buffer, DeviceBuffer<T>::Allocate(count));
  return absl::OkStatus();
}

template <typename T>
absl::Status CopyAsync(T* dst, const T* src, int64_t count, cudaMemcpyKind kind,
                       cudaStream_t stream, const char* what) {
  return CudaStatus(cudaMemcpyAsync(dst, src, count * sizeof(T), kind, stream), what);
}

bool RunsOnDevice(const LogitsRequest& r) {
  return r.sample && !r.return_logits && !r.params->has_penalties() && r.logit_bias.empty() &&
         (r.drafts.empty() || cpu::IsGreedy(*r.params));
}

}  // namespace

CudaLogitsProcessor::CudaLogitsProcessor(int64_t vocab, int64_t max_pass_rows,
                                         int64_t max_step_rows, cudaStream_t stream)
    : vocab_(vocab),
      words_(BitmaskWords(vocab)),
      max_pass_rows_(max_pass_rows),
      max_step_rows_(max_step_rows),
      stream_(stream) {}

absl::StatusOr<std::unique_ptr<CudaLogitsProcessor>> CudaLogitsProcessor::Create(
    int64_t vocab, int64_t max_pass_rows, int64_t max_step_rows, cudaStream_t stream) {
  if (vocab < 1 || max_pass_rows < 1 || max_step_rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA logits processor: vocab (", vocab, "), max_pass_rows (", max_pass_rows,
                     ") and max_step_rows (", max_step_rows, ") must be positive"));
  }
  std::unique_ptr<CudaLogitsProcessor> p(
      new CudaLogitsProcessor(vocab, max_pass_rows, max_step_rows, stream));
  RETURN_IF_ERROR(Allocate(p->pass_rows_, max_pass_rows));
  RETURN_IF_ERROR(Allocate(p->pass_settings_, max_pass_rows));
  RETURN_IF_ERROR(Allocate(p->pass_mask_, max_pass_rows * p->words_));
  RETURN_IF_ERROR(Allocate(p->work_, max_pass_rows * vocab));
  RETURN_IF_ERROR(Allocate(p->tokens_, max_step_rows));
  RETURN_IF_ERROR(Allocate(p->logprobs_, max_step_rows));
  RETURN_IF_ERROR(Allocate(p->top_ids_, max_step_rows * kMaxTopLogprobs));
  RETURN_IF_ERROR(Allocate(p->top_logprobs_, max_step_rows * kMaxTopLogprobs));
  return p;
}

absl::Status CudaLogitsProcessor::Process(const float* logits, int64_t num_rows, int64_t vocab,
                                          absl::Span<const LogitsRequest> requests,
                                          std::vector<LogitsResult>* results) {
  if (vocab != vocab_) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA logits processor: rows of ", vocab,
                                                   " logits; it was built for ", vocab_));
  }
  RETURN_IF_ERROR(Begin(requests, num_rows));
  for (int64_t start = 0; start < num_rows; start += max_pass_rows_) {
    RETURN_IF_ERROR(
        EnqueuePass(logits + start * vocab, start, std::min(max_pass_rows_, num_rows - start)));
  }
  return Finish(results);
}

absl::Status CudaLogitsProcessor::Begin(absl::Span<const LogitsRequest> requests,
                                        int64_t num_rows) {
  requests_ = requests;
  where_.assign(requests.size(), Where::kNowhere);
  first_entry_.assign(requests.size(), -1);
  entry_rows_.clear();
  entry_settings_.clear();
  entry_masks_.clear();
  host_requests_.clear();
  host_request_of_.clear();
  top_ = 0;
  want_logprobs_ = false;
  int64_t host_rows = 0;
  std::vector<size_t> on_device;
  for (size_t s = 0; s < requests.size(); ++s) {
    const LogitsRequest& r = requests[s];
    if (r.first_row < 0 || r.first_row + r.num_rows > num_rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("logits request ", s, " names rows outside the step's ", num_rows));
    }
    if (RunsOnDevice(r)) {
      where_[s] = Where::kDevice;
      on_device.push_back(s);
    } else if (r.sample || r.return_logits) {
      where_[s] = Where::kHost;
      LogitsRequest& copy = host_requests_.emplace_back(r);
      copy.first_row = host_rows;
      host_rows += r.num_rows;
      host_request_of_.push_back(s);
    }
  }
  host_logits_.resize(host_rows * vocab_);

  // Device rows in ascending step row, so that each pass's rows are one contiguous range.
  std::sort(on_device.begin(), on_device.end(),
            [&](size_t a, size_t b) { return requests[a].first_row < requests[b].first_row; });
  int64_t next_free_row = 0;
  for (size_t s : on_device) {
    const LogitsRequest& r = requests[s];
    if (r.first_row < next_free_row) {
      return absl::InvalidArgumentError(
          absl::StrCat("logits request ", s, " shares rows with another sampled request"));
    }
    next_free_row = r.first_row + r.num_rows;
    first_entry_[s] = static_cast<int64_t>(entry_rows_.size());
    const bool greedy = cpu::IsGreedy(*r.params);
    for (int64_t k = 0; k < r.num_rows; ++k) {
      entry_rows_.push_back(r.first_row + k);
      SequenceSampling& row = entry_settings_.emplace_back(
          ToSequenceSampling(*r.params, static_cast<uint64_t>(r.output_len + k)));
      if (!greedy) {  // K = 0 here: the one draw cpu::Sample would make
        std::mt19937_64 rng(SampleStreamSeed(r.params->seed, r.output_len + k));
        row.uniform = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
      }
      entry_masks_.push_back(r.bitmask.empty() ? nullptr : r.bitmask.data() + k * words_);
    }
    if (r.logprobs) {
      want_logprobs_ = true;
      top_ = std::max(top_, r.top_logprobs);
    }
  }
  top_ = static_cast<int32_t>(std::min<int64_t>(top_, vocab_));
  if (static_cast<int64_t>(entry_rows_.size()) > max_step_rows_) {
    return absl::InvalidArgumentError(absl::StrCat("a step samples ", entry_rows_.size(),
                                                   " logits rows on the device; the "
                                                   "CUDA logits processor holds ",
                                                   max_step_rows_));
  }
  return absl::OkStatus();
}

absl::Status CudaLogitsProcessor::EnqueuePass(const float* logits, int64_t start, int64_t count) {
  if (count < 1 || count > max_pass_rows_) {
    return absl::InvalidArgumentError(absl::StrCat("a logits pass of ", count,
                                                   " rows; the CUDA logits processor takes 1 to ",
                                                   max_pass_rows_));
  }
  const int64_t end = start + count;
  const auto first = std::lower_bound(entry_rows_.begin(), entry_rows_.end(), start);
  const auto last = std::lower_bound(first, entry_rows_.end(), end);
  const int64_t lo = first - entry_rows_.begin();
  const int64_t n = last - first;
  if (n > 0) {
    staged_rows_.resize(n);
    for (int64_t i = 0; i < n; ++i)
      staged_rows_[i] = static_cast<int32_t>(entry_rows_[lo + i] - start);
    // From pageable memory each copy returns once staged: the staging vectors may be reused.
    RETURN_IF_ERROR(CopyAsync(pass_rows_.data(), staged_rows_.data(), n, cudaMemcpyHostToDevice,
                              stream_, "sampling rows upload"));
    RETURN_IF_ERROR(CopyAsync(pass_settings_.data(), entry_settings_.data() + lo, n,
                              cudaMemcpyHostToDevice, stream_, "sampling settings upload"));
    RETURN_IF_ERROR(GatherLogits(
        {logits, LogitsType::kFloat32, pass_rows_.data(), work_.data(), count, n, vocab_},
        stream_));
    const auto masks = absl::MakeConstSpan(entry_masks_).subspan(lo, n);
    if (std::any_of(masks.begin(), masks.end(), [](const uint32_t* m) { return m != nullptr; })) {
      staged_mask_.assign(n * words_, ~0u);  // a row without a mask allows every token
      for (int64_t i = 0; i < n; ++i) {
        if (masks[i] != nullptr) std::copy_n(masks[i], words_, staged_mask_.data() + i * words_);
      }
      RETURN_IF_ERROR(CopyAsync(pass_mask_.data(), staged_mask_.data(), n * words_,
                                cudaMemcpyHostToDevice, stream_, "token bitmask upload"));
      RETURN_IF_ERROR(ApplyTokenBitmask({work_.data(), pass_mask_.data(), n, vocab_}, stream_));
    }
    RETURN_IF_ERROR(
        Sample({work_.data(), pass_settings_.data(), tokens_.data() + lo, n, vocab_}, stream_));
    if (want_logprobs_) {
      TokenLogprobsParams p;
      p.logits = logits;  // the raw rows: logprobs are taken before the mask
      p.rows = pass_rows_.data();
      p.tokens = tokens_.data() + lo;
      p.logprobs = logprobs_.data() + lo;
      p.top = top_;
      p.top_ids = top_ids_.data() + lo * top_;
      p.top_logprobs = top_logprobs_.data() + lo * top_;
      p.num_tokens = count;
      p.num_rows = n;
      p.vocab = vocab_;
      RETURN_IF_ERROR(TokenLogprobs(p, stream_));
    }
  }
  for (size_t h = 0; h < host_requests_.size(); ++h) {
    const LogitsRequest& r = requests_[host_request_of_[h]];
    const int64_t from = std::max(start, r.first_row);
    const int64_t to = std::min(end, r.first_row + r.num_rows);
    if (from >= to) continue;
    float* dst = host_logits_.data() + (host_requests_[h].first_row + from - r.first_row) * vocab_;
    RETURN_IF_ERROR(CopyAsync(dst, logits + (from - start) * vocab_, (to - from) * vocab_,
                              cudaMemcpyDeviceToHost, stream_, "host logits rows copy"));
  }
  return absl::OkStatus();
}

absl::Status CudaLogitsProcessor::Finish(std::vector<LogitsResult>* results) {
  const int64_t n = static_cast<int64_t>(entry_rows_.size());
  got_tokens_.resize(n);
  got_logprobs_.resize(want_logprobs_ ? n : 0);
  got_top_ids_.resize(n * top_);
  got_top_logprobs_.resize(n * top_);
  if (n > 0) {
    RETURN_IF_ERROR(CopyAsync(got_tokens_.data(), tokens_.data(), n, cudaMemcpyDeviceToHost,
                              stream_, "sampled tokens copy"));
  }
  if (n > 0 && want_logprobs_) {
    RETURN_IF_ERROR(CopyAsync(got_logprobs_.data(), logprobs_.data(), n, cudaMemcpyDeviceToHost,
                              stream_, "logprobs copy"));
  }
  if (n > 0 && top_ > 0) {
    RETURN_IF_ERROR(CopyAsync(got_top_ids_.data(), top_ids_.data(), n * top_,
                              cudaMemcpyDeviceToHost, stream_, "top token ids copy"));
    RETURN_IF_ERROR(CopyAsync(got_top_logprobs_.data(), top_logprobs_.data(), n * top_,
                              cudaMemcpyDeviceToHost, stream_, "top logprobs copy"));
  }
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "logits processing"));

  results->assign(requests_.size(), LogitsResult{});
  if (!host_requests_.empty()) {
    const int64_t host_rows = static_cast<int64_t>(host_logits_.size()) / vocab_;
    RETURN_IF_ERROR(host_processor_.Process(host_logits_.data(), host_rows, vocab_, host_requests_,
                                            &host_results_));
    for (size_t h = 0; h < host_results_.size(); ++h) {
      (*results)[host_request_of_[h]] = std::move(host_results_[h]);
    }
  }
  // As CpuLogitsProcessor: the accepted drafts, then the first pick that differs from its draft
  // (or the pick after the last draft). Each device row's pick is its row's greedy or drawn token.
  for (size_t s = 0; s < requests_.size(); ++s) {
    if (where_[s] != Where::kDevice) continue;
    const LogitsRequest& r = requests_[s];
    LogitsResult& out = (*results)[s];
    const int64_t k_drafts = static_cast<int64_t>(r.drafts.size());
    const int32_t top = std::min(r.top_logprobs, top_);
    for (int64_t k = 0; k <= k_drafts; ++k) {
      const int64_t e = first_entry_[s] + k;
      const int32_t token = got_tokens_[e];
      out.tokens.push_back(token);
      if (r.logprobs) {
        out.logprobs.push_back(got_logprobs_[e]);
        out.top_token_ids.insert(out.top_token_ids.end(), got_top_ids_.begin() + e * top_,
                                 got_top_ids_.begin() + e * top_ + top);
        out.top_logprobs.insert(out.top_logprobs.end(), got_top_logprobs_.begin() + e * top_,
                                got_top_logprobs_.begin() + e * top_ + top);
      }
      if (k < k_drafts && token != r.drafts[k]) break;
    }
  }
  return absl::OkStatus();
}

}  // namespace tpserve::cuda
