// What the GPU model tests (cuda_forward_pass_test.cc, cuda_lora_cases.cc) run through a loaded
// shard: prompts of ids inside every vocabulary, and one step's logits.
#pragma once

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "worker/forward_batch.h"
#include "worker/loaded_shard.h"

namespace tpserve::gpu_test {

// Token ids 100.. of a prompt: inside every vocabulary, and varied.
inline std::vector<int32_t> Prompt(int length, int salt) {
  std::vector<int32_t> ids(length);
  for (int i = 0; i < length; ++i) ids[i] = 100 + (i * 37 + salt * 101) % 4000;
  return ids;
}

// The step's logits rows, [num_logits, vocab]; a gtest failure when the step fails.
inline std::vector<float> Forward(LoadedShard& runner, const ForwardBatch& batch) {
  std::vector<float> logits;
  const absl::Status status = runner.forward_pass().Forward(batch, &logits);
  EXPECT_TRUE(status.ok()) << status;
  return logits;
}

}  // namespace tpserve::gpu_test
