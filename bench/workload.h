// What a serving benchmark sends: prompts of random token ids, output lengths, and Poisson
// arrival times, all drawn from seeded generators so that a run can be repeated exactly (with
// the same standard library).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tpserve::bench {

enum class LengthDistribution {
  kFixed,    // every request gets the nominal length
  kUniform,  // uniform in [len/2, len*3/2], at least 1
};

struct WorkloadOptions {
  int input_len = 128;   // prompt tokens after the shared prefix (nominal)
  int output_len = 128;  // tokens to generate (nominal)
  LengthDistribution len_dist = LengthDistribution::kFixed;
  int shared_prefix_len = 0;  // tokens of one prefix common to every prompt of a workload
  int32_t vocab_min = 100;    // prompt token ids are uniform in [vocab_min, vocab_max)
  int32_t vocab_max = 10000;
  uint64_t seed = 0;
};

struct BenchRequest {
  std::vector<int32_t> prompt;  // the shared prefix (if any), then this request's own tokens
  int max_tokens = 0;
  // Structured output: the text must match `regex` or be JSON that `json_schema` accepts (both
  // empty: unconstrained).
  std::string regex;
  std::string json_schema;
  std::string model;  // a LoRA adapter's name; empty: the base model
};

// `count` requests. Each `stream` gives independent draws, the shared prefix included, so the
// warm-up and the measured run can use different streams and never share a prompt.
std::vector<BenchRequest> MakeRequests(const WorkloadOptions& options, int count, uint64_t stream);

// Seconds from the start of a run at which each of `count` requests is sent: the first at 0,
// then exponential gaps of mean 1/`rate_per_s` (a Poisson process).
std::vector<double> PoissonArrivals(int count, double rate_per_s, uint64_t seed, uint64_t stream);

}  // namespace tpserve::bench
