// The bundled model (TPSERVE_MODEL_PATH: SmolLM2-135M-Instruct, scripts/fetch-model.sh) for the
// coordinator's unit tests, opened once per test binary. A file that cannot be read is a test
// failure saying how to fetch it, and null.
#pragma once

#include "model/gguf_file.h"
#include "model/tokenizer.h"

namespace tpserve {

const GgufFile* BundledModel();
const Tokenizer* BundledTokenizer();

}  // namespace tpserve
