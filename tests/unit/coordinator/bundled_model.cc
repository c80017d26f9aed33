#include "tests/unit/coordinator/bundled_model.h"

#include <memory>

#include "gtest/gtest.h"

namespace tpserve {

const GgufFile* BundledModel() {
  static const GgufFile* file = [] {
    absl::StatusOr<std::unique_ptr<GgufFile>> opened = GgufFile::Open(TPSERVE_MODEL_PATH);
    if (!opened.ok()) {
      ADD_FAILURE() << opened.status() << " (run scripts/fetch-model.sh)";
      return static_cast<GgufFile*>(nullptr);
    }
    return opened->release();
  }();
  return file;
}

const Tokenizer* BundledTokenizer() {
  static const Tokenizer* tokenizer = []() -> const Tokenizer* {
    const GgufFile* file = BundledModel();
    if (file == nullptr) return nullptr;
    absl::StatusOr<std::unique_ptr<Tokenizer>> loaded = Tokenizer::FromGguf(*file);
    if (!loaded.ok()) {
      ADD_FAILURE() << loaded.status();
      return nullptr;
    }
    return loaded->release();
  }();
  return tokenizer;
}

}  // namespace tpserve
