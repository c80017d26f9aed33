#include "bench/workload.h"

#include <algorithm>
#include <random>

namespace tpserve::bench {
namespace {

std::mt19937_64 MakeRng(uint64_t seed, uint64_t stream) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
  return std::mt19937_64(seq);
}

int DrawLength(int nominal, LengthDistribution dist, std::mt19937_64& rng) {
  if (dist == LengthDistribution::kFixed) return nominal;
  std::uniform_int_distribution<int> length(std::max(1, nominal / 2), nominal * 3 / 2);
  return length(rng);
}

void AppendTokens(int count, const WorkloadOptions& options, std::mt19937_64& rng,
                  std::vector<int32_t>& out) {
  std::uniform_int_distribution<int32_t> token(options.vocab_min, options.vocab_max - 1);
  for (int i = 0; i < count; ++i) out.push_back(token(rng));
}

}  // namespace

std::vector<BenchRequest> MakeRequests(const WorkloadOptions& options, int count, uint64_t stream) {
  std::mt19937_64 rng = MakeRng(options.seed, stream);
  std::vector<int32_t> prefix;
  AppendTokens(options.shared_prefix_len, options, rng, prefix);
  std::vector<BenchRequest> requests(count);
  for (BenchRequest& request : requests) {
    request.prompt = prefix;
    AppendTokens(DrawLength(options.input_len, options.len_dist, rng), options, rng,
                 request.prompt);
    request.max_tokens = DrawLength(options.output_len, options.len_dist, rng);
  }
  return requests;
}

std::vector<double> PoissonArrivals(int count, double rate_per_s, uint64_t seed, uint64_t stream) {
  std::mt19937_64 rng = MakeRng(seed, stream);
  std::exponential_distribution<double> gap(rate_per_s);
  std::vector<double> arrivals(count);
  for (int i = 1; i < count; ++i) arrivals[i] = arrivals[i - 1] + gap(rng);
  return arrivals;
}

}  // namespace tpserve::bench
