#include "model/rope_frequencies.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "model/dequantize.h"

namespace tpserve {
namespace {

constexpr char kFreqFactors[] = "rope_freqs.weight";

absl::StatusOr<std::vector<float>> ReadFreqFactors(const GgufFile& file, int64_t pairs) {
  const GgufTensorInfo* tensor = file.FindTensor(kFreqFactors);
  if (tensor == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("model has no tensor ", kFreqFactors));
  }
  if (tensor->dims.size() != 1 || tensor->dims[0] != pairs) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFreqFactors, " has dims [", absl::StrJoin(tensor->dims, ", "),
                     "], expected [", pairs, "] (rope.dimension_count / 2)"));
  }
  std::vector<float> factors(pairs);
  RETURN_IF_ERROR(Dequantize(tensor->type, file.TensorData(*tensor), absl::MakeSpan(factors)));
  for (int64_t i = 0; i < pairs; ++i) {
    if (!std::isfinite(factors[i]) || factors[i] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(kFreqFactors, "[", i, "] = ", factors[i],
                                                     " is not a finite positive factor"));
    }
  }
  return factors;
}

}  // namespace

absl::StatusOr<std::vector<double>> RopeInverseFrequencies(const GgufFile& file,
                                                           const ModelConfig& config) {
  const int64_t pairs = config.rope_dims / 2;
  std::vector<double> inv_freq(pairs);
  for (int64_t i = 0; i < pairs; ++i) {
    inv_freq[i] = std::pow(static_cast<double>(config.rope_theta),
                           -2.0 * static_cast<double>(i) / static_cast<double>(config.rope_dims));
  }
  switch (config.rope_scaling) {
    case RopeScaling::kNone:
      break;
    case RopeScaling::kLinear:
      for (double& f : inv_freq) f /= config.rope_scaling_factor;
      break;
    case RopeScaling::kLlama3: {
      ASSIGN_OR_RETURN(const std::vector<float> factors, ReadFreqFactors(file, pairs));
      for (int64_t i = 0; i < pairs; ++i) inv_freq[i] /= factors[i];
      break;
    }
  }
  return inv_freq;
}

std::vector<double> LocalRopeInverseFrequencies(const ModelConfig& config) {
  std::vector<double> inv_freq(config.rope_dims / 2);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    inv_freq[i] = std::pow(static_cast<double>(config.rope_theta_local),
                           -2.0 * static_cast<double>(i) / static_cast<double>(config.rope_dims));
  }
  return inv_freq;
}

std::vector<float> Llama3FrequencyDivisors(double theta, int64_t rope_dims,
                                           const Llama3RopeScaling& scaling) {
  const double context = scaling.original_context;
  const double low = scaling.low_freq_factor, high = scaling.high_freq_factor;
  std::vector<float> divisors(rope_dims / 2);
  for (int64_t i = 0; i < rope_dims / 2; ++i) {
    const double wavelength = 2.0 * M_PI / std::pow(theta, -2.0 * i / rope_dims);
    double divisor;
    if (wavelength < context / high) {
      divisor = 1.0;
    } else if (wavelength > context / low) {
      divisor = scaling.factor;
    } else {
      const double smooth = (context / wavelength - low) / (high - low);
      divisor = 1.0 / ((1.0 - smooth) / scaling.factor + smooth);
    }
    divisors[i] = static_cast<float>(divisor);
  }
  return divisors;
}

}  // namespace tpserve
