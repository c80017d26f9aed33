#include "tests/gpu/gpu_test_model.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/synthetic_model.h"

namespace tpserve::gpu_test {

const TestModel& GetTestModel() {
  static const TestModel* model = [] {
    auto* m = new TestModel;
    const char* env = std::getenv("TPSERVE_TEST_MODEL");
    const std::string bundled = env != nullptr ? env : TPSERVE_MODEL_PATH;
    if (std::filesystem::exists(bundled)) {
      m->path = bundled;
      m->real = true;
      return m;
    }
    SyntheticModelSpec spec;  // SmolLM2-135M's shape
    spec.layers = 30;
    spec.hidden = 576;
    spec.heads = 9;
    spec.kv_heads = 3;
    spec.ffn = 1536;
    spec.vocab = 49152;
    spec.context_length = 8192;
    spec.rope_theta = 100000.0;
    spec.dtype = GgmlType::kQ8_0;
    m->path = (std::filesystem::temp_directory_path() /
               absl::StrCat("tpserve-gpu-test-", getpid(), ".gguf"))
                  .string();
    const absl::Status status = WriteSyntheticModel(spec, m->path);
    if (!status.ok()) ADD_FAILURE() << "writing the random-weight model: " << status;
    std::atexit([] { std::filesystem::remove(GetTestModel().path); });
    return m;
  }();
  return *model;
}

}  // namespace tpserve::gpu_test
