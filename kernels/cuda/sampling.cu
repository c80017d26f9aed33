#include "kernels/cuda/sampling.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "absl/strings/str_cat.h"
#include "common/cuda_check.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/philox.h"

namespace tpserve::cuda {
namespace {

// One block per row. 1024 threads: a 128k vocabulary is ~125 tokens per thread per pass, and a
// decode batch rarely fills the device's multiprocessors, so a row's latency is what counts.
constexpr int kRowThreads = 1024;
constexpr int kGatherThreads = 256;
// Below this, 1 / temperature overflows the exponent: the draw is the argmax (as on the CPU).
constexpr float kGreedyTemperature = 1e-5f;
// Weights are fixed point with 40 fraction bits: the top token weighs 2^40, every other token at
// most that, so a row of at most 2^23 tokens sums to less than 2^63 in an unsigned 64-bit integer.
constexpr float kFixedOne = 1099511627776.0f;  // 2^40
constexpr int64_t kMaxVocab = int64_t{1} << 23;
constexpr int kBins = 256;  // one radix digit is 8 bits of the 64-bit rank key

// NaN counts as -inf; -0 becomes +0, so that equal logits tie (and order by id) as on the CPU.
__device__ __forceinline__ float LoadLogit(const float* row, int32_t i) {
  const float l = row[i];
  if (isnan(l)) return -INFINITY;
  return l == 0.0f ? 0.0f : l;
}

// A total order that sorts tokens as the CPU does (descending logit, then ascending id) as
// descending unsigned integers: the float's bits made monotone in the high half, the complement
// of the id in the low half. Keys are unique, so "the first t tokens" is "keys >= some key".
__device__ __forceinline__ uint64_t RankKey(float logit, int32_t id) {
  const uint32_t bits = __float_as_uint(logit);
  const uint32_t ordered = (bits & 0x80000000u) != 0 ? ~bits : (bits | 0x80000000u);
  return (static_cast<uint64_t>(ordered) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(id));
}

struct ArgmaxPair {
  float value;
  int32_t index;
};

struct ArgmaxOp {
  __device__ __forceinline__ ArgmaxPair operator()(const ArgmaxPair& a, const ArgmaxPair& b) const {
    return (a.value > b.value || (a.value == b.value && a.index < b.index)) ? a : b;
  }
};

using BlockArgmaxReduce = cub::BlockReduce<ArgmaxPair, kRowThreads>;
using BlockSumReduce = cub::BlockReduce<unsigned long long, kRowThreads>;
using BlockSumScan = cub::BlockScan<unsigned long long, kRowThreads, cub::BLOCK_SCAN_WARP_SCANS>;

// The block's argmax of one row, returned to every thread.
__device__ ArgmaxPair BlockArgmax(const float* row, int32_t vocab,
                                  BlockArgmaxReduce::TempStorage& temp, ArgmaxPair& result) {
  ArgmaxPair best{-INFINITY, INT32_MAX};  // a thread without tokens loses every comparison
  for (int32_t i = threadIdx.x; i < vocab; i += kRowThreads) {
    const float v = LoadLogit(row, i);
    // The thread's first token seeds it, so an all -inf row still names index 0.
    if (i == static_cast<int32_t>(threadIdx.x) || v > best.value) best = {v, i};
  }
  const ArgmaxPair reduced = BlockArgmaxReduce(temp).Reduce(best, ArgmaxOp());
  if (threadIdx.x == 0) result = reduced;
  __syncthreads();
  return result;
}

// One row's logits with the row's maximum and temperature: the weight of a token, in 2^-40
// units of the top token's, truncated (so a weight under 2^-40 is 0: the token is "dead").
struct RowView {
  const float* logits;
  int32_t vocab;
  float max_logit;
  float inv_temperature;

  __device__ __forceinline__ float Weight(float logit) const {
    return expf((logit - max_logit) * inv_temperature);  // as cpu::Sample computes it
  }
  __device__ __forceinline__ uint64_t Fixed(float weight) const {
    return static_cast<uint64_t>(weight * kFixedOne);
  }
};

struct SelectShared {
  unsigned int count[kBins];
  unsigned long long mass[kBins];
  BlockSumScan::TempStorage scan_count;
  BlockSumScan::TempStorage scan_mass;
  unsigned int digit;
  unsigned long long count_above, mass_above, bin_count, bin_mass;
};

// A prefix of the rank order (every key >= threshold) and its fixed-point mass.
struct Cut {
  uint64_t threshold;
  uint64_t mass;
};

// The shortest prefix, among live tokens with key >= lower, that holds `need` tokens
// (by_mass == false; need <= their number) or `need` fixed-point mass (by_mass == true;
// 1 <= need <= their mass). MSB-first radix select over the 64-bit keys, 8 bits a pass: each
// pass histograms the tokens that share the digits chosen so far, and the block scans the 256
// bins from the top to find the one where the count or mass runs out. It stops as soon as the
// whole chosen bin belongs to the prefix, which for distinct logits is after 3 or 4 passes.
// Sums are integers, so the result does not depend on the order of the atomics.
__device__ Cut RadixSelect(const RowView& row, bool by_mass, uint64_t need, uint64_t lower,
                           SelectShared& sh) {
  uint64_t prefix = 0;
  uint64_t mask = 0;
  uint64_t mass_above = 0;
  for (int shift = 56;; shift -= 8) {
    for (int b = threadIdx.x; b < kBins; b += kRowThreads) {
      sh.count[b] = 0;
      sh.mass[b] = 0;
    }
    __syncthreads();
    for (int32_t i = threadIdx.x; i < row.vocab; i += kRowThreads) {
      const float logit = LoadLogit(row.logits, i);
      const uint64_t key = RankKey(logit, i);
      if (key < lower || (key & mask) != prefix) continue;
      const uint64_t fixed = row.Fixed(row.Weight(logit));
      if (fixed == 0) continue;
      const int digit = static_cast<int>((key >> shift) & 0xFF);
      atomicAdd(&sh.count[digit], 1u);
      atomicAdd(&sh.mass[digit], static_cast<unsigned long long>(fixed));
    }
    __syncthreads();
    // Thread t holds digit 255 - t, so the inclusive scan runs from the highest keys down.
    const int t = threadIdx.x;
    const unsigned long long count = t < kBins ? sh.count[kBins - 1 - t] : 0;
    const unsigned long long mass = t < kBins ? sh.mass[kBins - 1 - t] : 0;
    unsigned long long count_through = 0;
    unsigned long long mass_through = 0;
    BlockSumScan(sh.scan_count).InclusiveSum(count, count_through);
    BlockSumScan(sh.scan_mass).InclusiveSum(mass, mass_through);
    const unsigned long long through = by_mass ? mass_through : count_through;
    const unsigned long long own = by_mass ? mass : count;
    // Exactly one bin has "before < need <= through": sums are monotone and need is in range.
    if (t < kBins && through - own < need && need <= through) {
      sh.digit = kBins - 1 - t;
      sh.count_above = count_through - count;
      sh.mass_above = mass_through - mass;
      sh.bin_count = count;
      sh.bin_mass = mass;
    }
    __syncthreads();
    const uint64_t digit = sh.digit;
    need -= by_mass ? sh.mass_above : sh.count_above;
    mass_above += sh.mass_above;
    prefix |= digit << shift;
    mask |= uint64_t{0xFF} << shift;
    // By count the bin is wholly in when it holds exactly what is still needed; by mass only when
    // it is a single token (a bigger bin may cross the target part-way).
    const bool whole_bin = by_mass ? sh.bin_count == 1 : sh.bin_count == need;
    const uint64_t bin_mass = sh.bin_mass;
    __syncthreads();  // every thread has read sh before the next pass clears it
    if (whole_bin || shift == 0) {
      // The prefix's lower digits are 0, so keys >= prefix also takes tokens below `lower`
      // that share its digits: those were never candidates.
      return Cut{prefix > lower ? prefix : lower, mass_above + bin_mass};
    }
  }
}

__global__ void __launch_bounds__(kRowThreads)
    ArgmaxKernel(const float* logits, int32_t* out, int32_t vocab) {
  __shared__ BlockArgmaxReduce::TempStorage temp;
  __shared__ ArgmaxPair result;
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  const ArgmaxPair best = BlockArgmax(row, vocab, temp, result);
  if (threadIdx.x == 0) out[blockIdx.x] = best.index;
}

__global__ void __launch_bounds__(kRowThreads)
    SampleKernel(const float* logits, const SequenceSampling* sequences, int32_t* out,
                 int32_t vocab) {
  __shared__ BlockArgmaxReduce::TempStorage argmax_temp;
  __shared__ ArgmaxPair argmax_result;
  __shared__ BlockSumReduce::TempStorage sum_temp;
  __shared__ BlockSumScan::TempStorage draw_scan;
  __shared__ SelectShared select;
  __shared__ unsigned long long broadcast[2];

  const int64_t seq = blockIdx.x;
  const float* row_logits = logits + seq * vocab;
  const SequenceSampling s = sequences[seq];
  const ArgmaxPair best = BlockArgmax(row_logits, vocab, argmax_temp, argmax_result);
  // Uniform across the block, so returning here skips no barrier another thread waits at.
  if (!(s.temperature >= kGreedyTemperature) || s.top_k == 1 || !isfinite(best.value)) {
    if (threadIdx.x == 0) out[seq] = best.index;
    return;
  }
  const bool use_top_k = s.top_k > 0 && s.top_k < vocab;
  const float top_p = (s.top_p > 0.0f && s.top_p <= 1.0f) ? s.top_p : 1.0f;
  const float min_p = (s.min_p >= 0.0f && s.min_p <= 1.0f) ? s.min_p : 0.0f;
  const RowView row{row_logits, vocab, best.value, 1.0f / s.temperature};

  // The live tokens (weight >= 2^-40) and their mass. Dead tokens never change a cut: top-k over
  // more tokens than are live keeps them all, and they add nothing to top-p's sums.
  unsigned long long my_mass = 0;
  unsigned long long my_live = 0;
  for (int32_t i = threadIdx.x; i < vocab; i += kRowThreads) {
    const uint64_t fixed = row.Fixed(row.Weight(LoadLogit(row_logits, i)));
    my_mass += fixed;
    my_live += fixed != 0;
  }
  const unsigned long long total_mass = BlockSumReduce(sum_temp).Sum(my_mass);
  __syncthreads();
  const unsigned long long live = BlockSumReduce(sum_temp).Sum(my_live);
  if (threadIdx.x == 0) {
    broadcast[0] = total_mass;
    broadcast[1] = live;
  }
  __syncthreads();

  Cut cut{0, broadcast[0]};
  if (use_top_k && static_cast<unsigned long long>(s.top_k) < broadcast[1]) {
    cut = RadixSelect(row, /*by_mass=*/false, s.top_k, /*lower=*/0, select);
  }
  if (top_p < 1.0f) {
    // The shortest prefix of the top-k set holding top_p of its mass. The product is rounded up,
    // as the CPU's "cumulative >= top_p * mass" in doubles; clamped, because mass may exceed
    // double's 53-bit integers.
    double target = ceil(static_cast<double>(top_p) * static_cast<double>(cut.mass));
    if (target < 1.0) target = 1.0;
    const uint64_t need =
        target >= static_cast<double>(cut.mass) ? cut.mass : static_cast<uint64_t>(target);
    cut = RadixSelect(row, /*by_mass=*/true, need, cut.threshold, select);
  }

  // The draw: the kept tokens (the cut, min-p, live) in id order, each thread a contiguous
  // chunk of ids; an exclusive scan gives each chunk its offset in the cumulative mass, and the
  // chunk that holds the target finds the token.
  const int32_t chunk = (vocab + kRowThreads - 1) / kRowThreads;
  const int32_t begin = min(vocab, static_cast<int32_t>(threadIdx.x) * chunk);
  const int32_t end = min(vocab, begin + chunk);
  auto kept_mass = [&](int32_t i) -> uint64_t {
    const float logit = LoadLogit(row_logits, i);
    if (RankKey(logit, i) < cut.threshold) return 0;
    const float weight = row.Weight(logit);
    if (weight < min_p) return 0;  // min-p keeps p >= min_p * p_max, i.e. weight >= min_p
    return row.Fixed(weight);
  };
  unsigned long long my_kept = 0;
  for (int32_t i = begin; i < end; ++i) my_kept += kept_mass(i);
  unsigned long long offset = 0;
  unsigned long long kept_total = 0;
  BlockSumScan(draw_scan).ExclusiveSum(my_kept, offset, kept_total);
  // In [0, kept_total): the high half of a 64 x 64-bit product, uniform up to 2^-64 per token;
  // or the given uniform number scaled (double keeps 53 bits of the product: about 2^-53 of the
  // mass). kept_total >= 2^40: the top token always passes (weight 1, key of the maximum).
  unsigned long long target = 0;
  if (s.uniform >= 0.0) {
    const double scaled = s.uniform * static_cast<double>(kept_total);
    target = scaled >= static_cast<double>(kept_total) ? kept_total - 1
                                                       : static_cast<unsigned long long>(scaled);
  } else {
    target = __umul64hi(SamplingRandomBits(s.seed, s.draw_index), kept_total);
  }
  if (offset <= target && target < offset + my_kept) {
    unsigned long long cumulative = offset;
    for (int32_t i = begin; i < end; ++i) {
      cumulative += kept_mass(i);
      if (target < cumulative) {
        out[seq] = i;
        break;
      }
    }
  }
}

__device__ __forceinline__ float LogitAsFloat(float v) { return v; }
__device__ __forceinline__ float LogitAsFloat(bf16 v) { return ToFloat(v); }

template <typename T>
__global__ void GatherLogitsKernel(const T* logits, const int32_t* rows, float* out,
                                   int64_t num_tokens, int64_t num_seqs, int64_t vocab) {
  for (int64_t s = blockIdx.y; s < num_seqs; s += gridDim.y) {
    const int32_t row = rows[s];
    if (row < 0 || row >= num_tokens) {
      if (threadIdx.x == 0 && blockIdx.x == 0) {
        printf("GatherLogits: sequence %lld names row %d, outside [0, %lld)\n",
               static_cast<long long>(s), row, static_cast<long long>(num_tokens));
      }
      __trap();
    }
    const T* src = logits + row * vocab;
    float* dst = out + s * vocab;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < vocab;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      dst[i] = LogitAsFloat(src[i]);
    }
  }
}

absl::Status CheckCounts(const char* op, int64_t num_seqs, int64_t vocab) {
  if (num_seqs < 0 || num_seqs > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": num_seqs ", num_seqs, " is outside [0, 2^31 - 1]"));
  }
  if (vocab < 1 || vocab > kMaxVocab) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": vocab ", vocab, " is outside [1, ", kMaxVocab, "]"));
  }
  return absl::OkStatus();
}

absl::Status NullError(const char* op) {
  return absl::InvalidArgumentError(absl::StrCat(op, ": a null device pointer"));
}

}  // namespace

SequenceSampling ToSequenceSampling(const SamplingParams& params, uint64_t draw_index) {
  SequenceSampling s;
  s.temperature = params.temperature;
  s.top_k = params.top_k;
  s.top_p = params.top_p;
  s.min_p = params.min_p;
  s.seed = params.seed;
  s.draw_index = draw_index;
  return s;
}

absl::Status GatherLogitsSupported(const GatherLogitsParams& p) {
  if (absl::Status status = CheckCounts("GatherLogits", p.num_seqs, p.vocab); !status.ok()) {
    return status;
  }
  if (p.num_seqs == 0) return absl::OkStatus();
  if (p.num_tokens < 1 || p.num_tokens > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("GatherLogits: num_tokens ", p.num_tokens, " is outside [1, 2^31 - 1]"));
  }
  if (p.logits == nullptr || p.rows == nullptr || p.out == nullptr)
    return NullError("GatherLogits");
  return absl::OkStatus();
}

absl::Status ArgmaxSupported(const ArgmaxParams& p) {
  if (absl::Status status = CheckCounts("Argmax", p.num_seqs, p.vocab); !status.ok()) {
    return status;
  }
  if (p.num_seqs > 0 && (p.logits == nullptr || p.out == nullptr)) return NullError("Argmax");
  return absl::OkStatus();
}

absl::Status SampleSupported(const SampleParams& p) {
  if (absl::Status status = CheckCounts("Sample", p.num_seqs, p.vocab); !status.ok()) {
    return status;
  }
  if (p.num_seqs > 0 && (p.logits == nullptr || p.sequences == nullptr || p.out == nullptr)) {
    return NullError("Sample");
  }
  return absl::OkStatus();
}

absl::Status GatherLogits(const GatherLogitsParams& p, cudaStream_t stream) {
  if (absl::Status status = GatherLogitsSupported(p); !status.ok()) return status;
  if (p.num_seqs == 0) return absl::OkStatus();
  const int64_t blocks_per_row = (p.vocab + kGatherThreads - 1) / kGatherThreads;
  const dim3 grid(static_cast<unsigned>(blocks_per_row),
                  static_cast<unsigned>(p.num_seqs < 65535 ? p.num_seqs : 65535));
  if (p.logits_type == LogitsType::kFloat32) {
    GatherLogitsKernel<<<grid, kGatherThreads, 0, stream>>>(
        static_cast<const float*>(p.logits), p.rows, p.out, p.num_tokens, p.num_seqs, p.vocab);
  } else {
    GatherLogitsKernel<<<grid, kGatherThreads, 0, stream>>>(
        static_cast<const bf16*>(p.logits), p.rows, p.out, p.num_tokens, p.num_seqs, p.vocab);
  }
  return CudaStatus(cudaGetLastError(), "GatherLogits launch");
}

absl::Status Argmax(const ArgmaxParams& p, cudaStream_t stream) {
  if (absl::Status status = ArgmaxSupported(p); !status.ok()) return status;
  if (p.num_seqs == 0) return absl::OkStatus();
  ArgmaxKernel<<<static_cast<unsigned>(p.num_seqs), kRowThreads, 0, stream>>>(
      p.logits, p.out, static_cast<int32_t>(p.vocab));
  return CudaStatus(cudaGetLastError(), "Argmax launch");
}

absl::Status Sample(const SampleParams& p, cudaStream_t stream) {
  if (absl::Status status = SampleSupported(p); !status.ok()) return status;
  if (p.num_seqs == 0) return absl::OkStatus();
  SampleKernel<<<static_cast<unsigned>(p.num_seqs), kRowThreads, 0, stream>>>(
      p.logits, p.sequences, p.out, static_cast<int32_t>(p.vocab));
  return CudaStatus(cudaGetLastError(), "Sample launch");
}

}  // namespace tpserve::cuda
