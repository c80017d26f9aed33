#include "worker/decode_buckets.h"

namespace tpserve {

std::vector<int64_t> DecodeBuckets(int64_t max_num_seqs) {
  std::vector<int64_t> buckets;
  for (int64_t b : {1, 2, 4}) {
    if (b < max_num_seqs) buckets.push_back(b);
  }
  for (int64_t b = 8; b < max_num_seqs; b += 8) buckets.push_back(b);
  if (max_num_seqs > 0) buckets.push_back(max_num_seqs);
  return buckets;
}

}  // namespace tpserve
