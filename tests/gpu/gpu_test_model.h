// The model the GPU tests run: the bundled SmolLM2-135M when this machine has it (the
// TPSERVE_TEST_MODEL environment variable, else the build's TPSERVE_MODEL_PATH), otherwise a
// random-weight model of the same shape written once per process to the temporary directory:
// the GPU machine receives no model file (scripts/gpu-check.sh).
#pragma once

#include <string>

namespace tpserve::gpu_test {

struct TestModel {
  std::string path;
  bool real = false;  // the bundled model, not random weights
};

const TestModel& GetTestModel();

}  // namespace tpserve::gpu_test
