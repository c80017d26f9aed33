// The bundled model's tokenizer and chat template, loaded once per fuzz process: the request and
// tokenizer targets fuzz the real vocabulary and template the server runs with.
#pragma once

#include <memory>

#include "model/chat_template.h"
#include "model/gguf_file.h"
#include "model/model_config.h"
#include "model/tokenizer.h"

namespace tpserve {

struct BundledModel {
  std::unique_ptr<GgufFile> file;
  ModelConfig config;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat_template;
};

// Loads TPSERVE_MODEL_PATH (a compile definition: the file scripts/fetch-model.sh fetches) on the
// first call. A model that does not load ends the process with a message: no fuzzing can start.
const BundledModel& GetBundledModel();

}  // namespace tpserve
