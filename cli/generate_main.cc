// tpserve-generate: runs one prompt through the model in this process and streams the text.
// Ends with prefill and decode throughput on stderr.
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "kernels/cpu/sampling.h"
#include "kernels/cpu/threads.h"
#include "model/chat_template.h"
#include "model/detokenizer.h"
#include "model/hf_folder.h"
#include "model/tokenizer.h"
#include "worker/comm/single_rank_communicator.h"
#include "worker/cuda_backend.h"
#include "worker/forward_batch.h"
#include "worker/loaded_shard.h"

namespace tpserve {
namespace {

struct Flags {
  std::string model;
  std::string prompt;
  int max_tokens = 128;
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  bool chat = false;
  bool ignore_eos = false;
  int threads = 0;
  std::string device = "cpu";
  bool enforce_eager = false;
  std::string kv_cache_dtype = "auto";
  std::string quantization = "none";
};

absl::Status Generate(const Flags& flags) {
  cpu::SetCpuThreads(flags.threads);
  constexpr int64_t kBlockSize = 16;
  SingleRankCommunicator comm;
  ModelRunnerOptions options;
  options.model_path = flags.model;
  options.block_size = kBlockSize;
  options.kv_cache_fp8 = flags.kv_cache_dtype != "auto";
  options.weights_fp8 = flags.quantization == "fp8";
  // The pool only has to hold this one sequence; it is sized after tokenizing below.
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, OpenModel(flags.model));
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::FromGguf(*file));
  std::string text = flags.prompt;
  if (flags.chat) {
    ASSIGN_OR_RETURN(const ChatTemplate chat_template,
                     ChatTemplate::Load(*file, *tokenizer, /*override_path=*/""));
    ASSIGN_OR_RETURN(text, chat_template.ApplyUserPrompt(flags.prompt));
  }
  ASSIGN_OR_RETURN(std::vector<int32_t> prompt, tokenizer->Encode(text, /*parse_special=*/true));
  if (prompt.empty()) return absl::InvalidArgumentError("--prompt encodes to no tokens");
  const int64_t total = static_cast<int64_t>(prompt.size()) + flags.max_tokens;
  options.kv_cache_blocks = (total + kBlockSize - 1) / kBlockSize;
  DeviceCommunicator* device_comm = nullptr;
  if (flags.device == "cuda") {
    options.device = Device::kCuda;
    options.cuda.max_num_seqs = 1;
    options.cuda.max_num_batched_tokens = static_cast<int64_t>(prompt.size());
    options.cuda.enforce_eager = flags.enforce_eager;
    ASSIGN_OR_RETURN(device_comm, SingleRankDeviceComm());
  }
  ASSIGN_OR_RETURN(std::unique_ptr<LoadedShard> runner, LoadShard(options, &comm, device_comm));
  if (total > runner->config().context_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt (", prompt.size(), " tokens) plus --max-tokens (", flags.max_tokens,
                     ") exceeds the model's context length of ", runner->config().context_length));
  }
  std::vector<int32_t> block_table(options.kv_cache_blocks);
  for (int32_t b = 0; b < options.kv_cache_blocks; ++b) block_table[b] = b;

  SamplingParams sampling;
  sampling.temperature = flags.temperature;
  sampling.top_k = flags.top_k;
  sampling.top_p = flags.top_p;
  RETURN_IF_ERROR(sampling.Validate());
  std::mt19937_64 rng(flags.seed);
  IncrementalDetokenizer detokenizer(*tokenizer);
  const int64_t vocab = runner->config().vocab_size;

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto decode_start = start;
  std::vector<float> logits;
  std::vector<int32_t> step_tokens = prompt;
  int32_t position = 0;
  int generated = 0;
  while (generated < flags.max_tokens) {
    ForwardBatchBuilder builder(kBlockSize);
    builder.AddSequence(step_tokens, position, block_table, /*all_logits=*/false);
    RETURN_IF_ERROR(runner->forward_pass().Forward(builder.Build(), &logits));
    if (generated == 0) decode_start = Clock::now();
    position += static_cast<int32_t>(step_tokens.size());
    const int32_t token = cpu::Sample(logits.data(), vocab, sampling, rng);
    ++generated;
    if (!flags.ignore_eos && tokenizer->IsEndOfGeneration(token)) break;
    const std::string piece = detokenizer.Add(token);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    step_tokens = {token};
  }
  const std::string rest = detokenizer.Flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const auto end = Clock::now();
  const double prefill_s = std::chrono::duration<double>(decode_start - start).count();
  const double decode_s = std::chrono::duration<double>(end - decode_start).count();
  // The first sampled token comes from the prefill; each later one costs a decode step.
  const int decode_steps = generated - 1;
  std::fprintf(stderr, "prefill: %zu tokens in %.3f s (%.1f tokens/s)\n", prompt.size(), prefill_s,
               prompt.size() / prefill_s);
  std::fprintf(stderr, "decode: %d tokens in %.3f s (%.1f tokens/s)\n", decode_steps, decode_s,
               decode_steps > 0 ? decode_steps / decode_s : 0.0);
  return absl::OkStatus();
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  tpserve::Flags flags;
  CLI::App app{"Generate text from a GGUF Llama model in this process"};
  app.add_option("--model", flags.model, "GGUF model file or Hugging Face folder")
      ->required()
      ->check(CLI::ExistingPath);
  app.add_option("--prompt", flags.prompt, "prompt text")->required();
  app.add_option("--max-tokens", flags.max_tokens, "tokens to generate")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--temperature", flags.temperature, "0 samples greedily")
      ->check(CLI::Range(0.0f, 100.0f));
  app.add_option("--top-k", flags.top_k, "keep the k likeliest tokens (0 = all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--top-p", flags.top_p, "nucleus probability mass")->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--seed", flags.seed, "sampling seed");
  app.add_flag("--chat", flags.chat, "wrap the prompt in the model's chat template");
  app.add_option("--threads", flags.threads, "CPU threads (0 = every core)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--device", flags.device, "cpu, or cuda (GPU 0)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_flag("--enforce-eager", flags.enforce_eager, "cuda: decode without the CUDA graph");
  app.add_option("--kv-cache-dtype", flags.kv_cache_dtype,
                 "fp8 (= fp8_e4m3): K and V as E4M3 codes, at the model's KV-cache scales")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "fp8", "fp8_e4m3"}));
  app.add_option("--quantization", flags.quantization,
                 "cuda: fp8 quantizes the linears' weights to E4M3 at load (W8A8)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "fp8"}));
  app.add_flag("--ignore-eos", flags.ignore_eos, "keep generating past end-of-generation tokens");
  CLI11_PARSE(app, argc, argv);
  const absl::Status status = tpserve::Generate(flags);
  if (!status.ok()) {
    std::fprintf(stderr, "tpserve-generate: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
