// tpserve-calibrate-kv: measures the scales at which an FP8 KV cache should store a GGUF model's
// K and V (worker/kv_calibration.h) by running the model over calibration text on this machine's
// CPU, and writes a copy of the model that carries them. Served with --kv-cache-dtype fp8, the
// copy's KV cache uses them; other servers (llama.cpp) do not know the extra tensors.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/threads.h"
#include "model/gguf_file.h"
#include "model/tokenizer.h"
#include "worker/cpu_weights.h"
#include "worker/kv_calibration.h"

namespace tpserve {
namespace {

struct Flags {
  std::string input, output, text;
  int64_t chunk_tokens = 512;
  int64_t max_tokens = 0;
  bool per_layer = false;
  std::string cpu_weights = "auto";
  int threads = 0;
};

absl::Status Calibrate(const Flags& flags) {
  std::error_code same_error;
  if (std::filesystem::equivalent(flags.input, flags.output, same_error)) {
    return absl::InvalidArgumentError("the output is the input: write the copy elsewhere");
  }
  if (std::filesystem::is_directory(flags.input)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flags.input,
                     " is a folder: a GGUF file is calibrated here (a Hugging Face "
                     "checkpoint carries its own k_scale and v_scale, as "
                     "llm-compressor writes them)"));
  }
  cpu::SetCpuThreads(flags.threads);
  std::ifstream in(flags.text, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", flags.text));
  std::stringstream text;
  text << in.rdbuf();
  ASSIGN_OR_RETURN(const std::unique_ptr<GgufFile> file, GgufFile::Open(flags.input));
  ASSIGN_OR_RETURN(const std::unique_ptr<Tokenizer> tokenizer, Tokenizer::FromGguf(*file));
  ASSIGN_OR_RETURN(std::vector<int32_t> tokens,
                   tokenizer->Encode(text.str(), /*parse_special=*/false));
  if (flags.max_tokens > 0 && static_cast<int64_t>(tokens.size()) > flags.max_tokens) {
    tokens.resize(flags.max_tokens);
  }
  KvCalibrationOptions options;
  if (tokenizer->add_bos()) options.bos_id = tokenizer->bos_id();
  options.chunk_tokens = flags.chunk_tokens;
  options.per_layer = flags.per_layer;
  options.cpu_weights = *ParseCpuWeights(flags.cpu_weights);  // the flag admits only its names
  options.progress = [](int64_t done, int64_t total) {
    std::fprintf(stderr, "\rtpserve-calibrate-kv: %lld/%lld tokens", static_cast<long long>(done),
                 static_cast<long long>(total));
    if (done == total) std::fputc('\n', stderr);
  };
  ASSIGN_OR_RETURN(const KvCacheScales scales, CalibrateKvScales(*file, tokens, options));
  // Written aside and renamed: a failed write leaves no half file behind.
  const std::string partial = flags.output + ".partial";
  RETURN_IF_ERROR(WriteWithKvScales(*file, scales, partial));
  std::error_code error;
  std::filesystem::rename(partial, flags.output, error);
  if (error) {
    std::filesystem::remove(partial, error);
    return absl::InternalError(absl::StrCat("cannot rename ", partial, " to ", flags.output));
  }
  float low = scales.k[0][0], high = low;
  for (const auto* rows : {&scales.k, &scales.v}) {
    for (const std::vector<float>& row : *rows) {
      for (const float s : row) {
        low = std::min(low, s);
        high = std::max(high, s);
      }
    }
  }
  std::fprintf(stderr,
               "tpserve-calibrate-kv: wrote %s: K and V scales of %zu layers (%s), from %g to %g, "
               "over %zu tokens\n",
               flags.output.c_str(), scales.k.size(), flags.per_layer ? "per layer" : "per KV head",
               low, high, tokens.size());
  return absl::OkStatus();
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  tpserve::Flags flags;
  CLI::App app{"Calibrate the FP8 KV-cache scales of a GGUF model over a text"};
  app.add_option("input", flags.input, "GGUF model file")->required()->check(CLI::ExistingPath);
  app.add_option("output", flags.output, "GGUF file to write: the model with its KV-cache scales")
      ->required();
  app.add_option("--text", flags.text,
                 "calibration text (UTF-8), e.g. a few thousand tokens of "
                 "what the model will serve")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--chunk-tokens", flags.chunk_tokens,
                 "the text runs as sequences of this many tokens")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--max-tokens", flags.max_tokens, "use only the text's first tokens (0 = all)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--per-layer", flags.per_layer,
               "one K and one V scale per layer instead of one per KV head");
  app.add_option("--cpu-weights", flags.cpu_weights,
                 "CPU: how weights in GGUF blocks are held and multiplied. packed: their own bytes, "
                 "activations rounded to 8 bits per block (as llama.cpp); packed-a16: the same, "
                 "activations at 16 bits (twice the integer work, within 1e-7 KL of fp32); fp32: "
                 "decoded at load, products in fp32 (4-8x the memory, slower); auto: packed-a16 "
                 "below 1B parameters, packed above")
      ->capture_default_str()
      ->check(CLI::IsMember(tpserve::CpuWeightsNames()));
  app.add_option("--threads", flags.threads, "CPU threads (0 = every core)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  const absl::Status status = tpserve::Calibrate(flags);
  if (!status.ok()) {
    std::fprintf(stderr, "tpserve-calibrate-kv: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
