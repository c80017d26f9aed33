// The batch sizes the CUDA model captures decode graphs for, as vLLM does: 1, 2, 4, then every
// multiple of 8, up to the most sequences a step carries. A decode step of n sequences runs the
// graph of the smallest bucket >= n, padded; a bucket costs one graph (a few MB) and its capture.
#pragma once

#include <cstdint>
#include <vector>

namespace tpserve {

// Ascending; the last is max_num_seqs itself (when positive).
std::vector<int64_t> DecodeBuckets(int64_t max_num_seqs);

}  // namespace tpserve
