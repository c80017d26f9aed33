// The model of a GGUF file as an FP8 checkpoint's Hugging Face view presents one
// (model/hf_fp8.h): every projection weight as E4M3 codes with one scale per row (llm-compressor's
// "channel" strategy) or one for the tensor (ModelOpt), quantized by kernels/cpu/fp8_matmul's
// rule (scale = max |x| / 448); the other tensors as they are, but for the embedding, also FP8
// with `fp8_embedding` (which no checkpoint does: the loader must decode it all the same). For
// tests of the loader and the CUDA model that need an FP8 checkpoint without writing a folder.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "model/gguf_file.h"

namespace tpserve::testing {

absl::StatusOr<std::unique_ptr<GgufFile>> Fp8CheckpointView(const GgufFile& file, bool per_channel,
                                                            bool fp8_embedding = false);

}  // namespace tpserve::testing
