#include "fuzz/bundled_model.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace tpserve {
namespace {

[[noreturn]] void Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "fuzz: %s: %s (run scripts/fetch-model.sh)\n", what.c_str(),
               std::string(status.message()).c_str());
  std::exit(1);
}

BundledModel Load() {
  BundledModel model;
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(TPSERVE_MODEL_PATH);
  if (!file.ok()) Fail(TPSERVE_MODEL_PATH, file.status());
  model.file = *std::move(file);
  absl::StatusOr<ModelConfig> config = ModelConfig::FromGguf(*model.file);
  if (!config.ok()) Fail("model config", config.status());
  model.config = *config;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromGguf(*model.file);
  if (!tokenizer.ok()) Fail("tokenizer", tokenizer.status());
  model.tokenizer = *std::move(tokenizer);
  absl::StatusOr<ChatTemplate> chat_template =
      ChatTemplate::Load(*model.file, *model.tokenizer, /*override_path=*/"");
  if (!chat_template.ok()) Fail("chat template", chat_template.status());
  model.chat_template = std::make_unique<ChatTemplate>(*std::move(chat_template));
  return model;
}

}  // namespace

const BundledModel& GetBundledModel() {
  static const BundledModel* const model = new BundledModel(Load());
  return *model;
}

}  // namespace tpserve
