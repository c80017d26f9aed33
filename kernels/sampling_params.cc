#include "kernels/sampling_params.h"

#include <cmath>
#include <limits>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

// One row of the table in the header: value in [lo, hi] (lo excluded when lo_open), else
// "<field> = <value> <rule>".
struct Range {
  const char* field;
  double lo;
  bool lo_open;
  double hi;
  const char* rule;
};

std::optional<SamplingParams::FieldError> Check(const Range& range, double value) {
  // NaN fails every comparison, so it is refused too.
  if (value >= range.lo && value <= range.hi && !(range.lo_open && value == range.lo)) {
    return std::nullopt;
  }
  return SamplingParams::FieldError{range.field,
                                    absl::StrCat(range.field, " = ", value, " ", range.rule)};
}

}  // namespace

std::optional<SamplingParams::FieldError> SamplingParams::FirstInvalidField() const {
  constexpr double kMaxFloat = std::numeric_limits<float>::max();
  constexpr double kMaxInt = std::numeric_limits<int32_t>::max();
  const std::pair<Range, double> checks[] = {
      {{"temperature", 0, false, kMaxFloat, "must be a finite number >= 0"}, temperature},
      {{"top_k", 0, false, kMaxInt, "must be >= 0 (0 disables it)"}, static_cast<double>(top_k)},
      {{"top_p", 0, true, 1, "is outside (0, 1]"}, top_p},
      {{"min_p", 0, false, 1, "is outside [0, 1]"}, min_p},
      {{"repetition_penalty", 0.01, false, 100, "is outside [0.01, 100]"}, repetition_penalty},
      {{"presence_penalty", -2, false, 2, "is outside [-2, 2]"}, presence_penalty},
      {{"frequency_penalty", -2, false, 2, "is outside [-2, 2]"}, frequency_penalty},
  };
  for (const auto& [range, value] : checks) {
    if (auto error = Check(range, value)) return error;
  }
  return std::nullopt;
}

absl::Status SamplingParams::Validate() const {
  if (auto error = FirstInvalidField()) return absl::InvalidArgumentError(error->message);
  return absl::OkStatus();
}

uint64_t RandomSamplingSeed() {
  thread_local std::mt19937_64 seeds{std::random_device{}()};
  return seeds();
}

}  // namespace tpserve
